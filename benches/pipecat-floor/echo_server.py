"""Pipecat's per-call floor: a Twilio Media Streams websocket echo.

One uvicorn process, one worker. Each websocket to /ws is one call: the endpoint reads Twilio's
`connected` and `start` messages the way Pipecat's own runner does (parse_telephony_websocket),
builds a FastAPIWebsocketTransport with a TwilioFrameSerializer, and runs a pipeline whose only
processor turns every caller audio frame into an output audio frame: the caller hears itself.

No VAD, no STT, LLM or TTS, no RTVI, no turn tracking, no auto hang-up through Twilio's REST API
(auto_hang_up=False, so no credentials are needed and nothing leaves the machine). What is left is
the work Pipecat does for any telephony call: the websocket, JSON and base64, μ-law to PCM and back,
the frame queues and tasks of the input and output transports, and the output's real-time pacing.
Pipeline audio runs at 8 kHz, Twilio's rate, so nothing is resampled, and the output is written in
20 ms chunks (audio_out_10ms_chunks=2), Twilio's own framing.

Usage: python echo_server.py [--host 127.0.0.1] [--port 18765]
"""

import argparse
import sys

import uvicorn
from fastapi import FastAPI, WebSocket
from loguru import logger
from pipecat.frames.frames import Frame, InputAudioRawFrame, OutputAudioRawFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.runner.utils import parse_telephony_websocket
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import (
    FastAPIWebsocketParams,
    FastAPIWebsocketTransport,
)
from pipecat.workers.runner import WorkerRunner

TWILIO_SAMPLE_RATE = 8000

app = FastAPI()


class Echo(FrameProcessor):
    """Sends the caller's audio back: each input audio frame becomes an output audio frame."""

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            await self.push_frame(
                OutputAudioRawFrame(
                    audio=frame.audio,
                    sample_rate=frame.sample_rate,
                    num_channels=frame.num_channels,
                )
            )
        else:
            await self.push_frame(frame, direction)


@app.get("/healthz")
async def healthz():
    return {"status": "ok"}


@app.websocket("/ws")
async def call(websocket: WebSocket):
    await websocket.accept()
    transport_type, call_data = await parse_telephony_websocket(websocket)
    if transport_type != "twilio":
        logger.warning(f"not a Twilio stream: {transport_type}")
        await websocket.close(code=4000)
        return
    serializer = TwilioFrameSerializer(
        stream_sid=call_data["stream_id"],
        call_sid=call_data["call_id"],
        params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
    )
    transport = FastAPIWebsocketTransport(
        websocket=websocket,
        params=FastAPIWebsocketParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            audio_in_sample_rate=TWILIO_SAMPLE_RATE,
            audio_out_sample_rate=TWILIO_SAMPLE_RATE,
            audio_out_10ms_chunks=2,
            add_wav_header=False,
            serializer=serializer,
        ),
    )
    worker = PipelineWorker(
        Pipeline([transport.input(), Echo(), transport.output()]),
        params=PipelineParams(
            audio_in_sample_rate=TWILIO_SAMPLE_RATE,
            audio_out_sample_rate=TWILIO_SAMPLE_RATE,
        ),
        enable_rtvi=False,
        enable_turn_tracking=False,
        idle_timeout_secs=None,
    )

    @transport.event_handler("on_client_disconnected")
    async def on_client_disconnected(_transport, _websocket):
        await worker.cancel()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=18765)
    args = parser.parse_args()
    # Pipecat logs every call's setup at DEBUG; a server under load runs at WARNING.
    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        workers=1,
        access_log=False,
        log_level="warning",
    )


if __name__ == "__main__":
    main()
