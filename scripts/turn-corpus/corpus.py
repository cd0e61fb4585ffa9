"""What the turn-taking corpus says: every clip's category, voice, words and timing plan.

Kept apart from the synthesis (generate.py) so the plan can be read and reviewed as
data. A clip is a list of caller segments, each spoken as one unit by one voice, with
known silences between them; the generator measures each segment's length, so every
time in the labels follows from the plan and the synthesis alone.

Pauses and onsets are spread evenly over their ranges (not drawn at random), so the
corpus covers the whole range the issue names and reruns give the same plan.
"""

PIPER = "piper:en_US-joe-medium"
ESPEAK = "espeak-ng:en-us"
ESPEAK_F = "espeak-ng:en-us+f3"

# Lead-in of line noise before the caller's first word, and tail after the last sound.
LEAD_MS = 600
TAIL_MS = 1200

COMPLETE = [
    "Yes, that works for me.",
    "My name is Priya Sharma.",
    "I would like to book an appointment for Tuesday morning.",
    "No, I am not interested, thank you.",
    "Sure, you can call me back after five.",
    "I already paid the bill last week.",
    "That sounds good, please go ahead.",
    "I am calling about my order.",
    "Yes, I am available tomorrow afternoon.",
    "Can you send me the details by message?",
    "I live in Pune.",
    "We need two rooms for three nights.",
    "Please cancel my subscription.",
    "I think the second option is better.",
    "It was delivered yesterday evening.",
    "Okay, I understand.",
    "My account is under my husband's name.",
    "The internet has been down since Monday.",
    "No, that is everything for today.",
    "I want to speak with the manager.",
]

# Mid-sentence thinking pauses: the segments of one answer; a filler ("um", "uh") is a
# segment of its own, with a pause before it and a shorter one after.
PAUSED = [
    ["I live in", "Pune."],
    ["I live in", "um", "Pune."],
    ["My appointment is on", "the twelfth."],
    ["I was thinking of", "uh", "maybe next Friday."],
    ["The problem is that", "the app keeps crashing."],
    ["I would like to", "um", "change my delivery address."],
    ["We moved here from", "Bangalore last year."],
    ["Can you", "uh", "tell me the price again?"],
    ["It is for my", "mother's account."],
    ["I bought it", "um", "about two weeks ago."],
    ["The best time to call is", "after lunch."],
    ["My son", "uh", "he usually handles the payments."],
    ["I am not sure, but", "I think it was a Tuesday."],
    ["Let me check", "um", "yes, it is the blue one."],
    ["The doctor said", "I should come back in a month."],
    ["I want the", "uh", "the larger plan."],
    ["Because I was", "traveling all of last week."],
    ["So what I need is", "um", "a refund for the extra charge."],
]
FILLERS = {"um", "uh"}

# Dictation read out in groups: (what the agent asked, what it expects, the groups).
DICTATED = [
    ("What is the best number to reach you?", "phone",
     ["My number is nine eight four", "five five two", "one three seven six."]),
    ("Can I have your phone number?", "phone",
     ["It's seven zero two", "eight eight one", "four four five nine."]),
    ("What is your mobile number?", "phone",
     ["nine one two", "three four five", "six seven eight nine."]),
    ("Which number should we call back?", "phone",
     ["Eight zero zero", "two one six", "three three zero one."]),
    ("What is your phone number?", "phone",
     ["six five zero", "nine nine three", "one two eight four."]),
    ("Could you repeat your number?", "phone",
     ["Sure, four one five", "two two seven", "oh nine three eight."]),
    ("What is your date of birth?", "date",
     ["The fourteenth of March", "nineteen ninety two."]),
    ("When would you like the appointment?", "date",
     ["On the third", "of August."]),
    ("What date did you place the order?", "date",
     ["It was twenty one", "oh six", "twenty twenty five."]),
    ("When does your policy expire?", "date",
     ["The thirtieth of", "November", "next year."]),
    ("How much was the charge?", "amount",
     ["Two thousand", "four hundred", "and fifty rupees."]),
    ("What amount would you like to pay today?", "amount",
     ["One lakh", "twenty five thousand."]),
    ("How much did you pay?", "amount",
     ["It was three hundred", "and forty nine dollars."]),
    ("What is your monthly budget?", "amount",
     ["About seven thousand", "five hundred", "per month."]),
    ("What is your email address?", "email",
     ["priya dot sharma", "at gmail", "dot com."]),
    ("Where should we send the invoice?", "email",
     ["r k verma seventy seven", "at yahoo", "dot co dot in."]),
    ("Can I have your email?", "email",
     ["It's john underscore d", "at outlook", "dot com."]),
    ("What email should we use?", "email",
     ["anita dot rao", "at company dot com."]),
]

BACKCHANNELS = ["uh-huh", "mm-hm", "yeah", "okay", "right", "haan", "achha"]

INTERRUPTIONS = [
    "Wait, stop, I have a question.",
    "Sorry, can you repeat that?",
    "No no, that's wrong.",
    "Hold on, that is not my number.",
    "Excuse me, I already paid that.",
    "Stop, I am not interested.",
    "Actually, can I talk to a person?",
]

# What the agent is saying while the caller backchannels or interrupts (for the record:
# the clip holds the caller's side only, as the carrier delivers it).
AGENT_LINE = (
    "Thanks for taking the call. I am calling from City Clinic to confirm your "
    "appointment on Tuesday at ten, and to go over a few details about the visit."
)


def spread(i, n, lo, hi):
    """The i-th of n values spread evenly over [lo, hi], in whole milliseconds."""
    if n <= 1:
        return lo
    return round(lo + (hi - lo) * i / (n - 1))


def plan():
    """Every clip of the corpus, as a list of dicts the generator renders in order."""
    clips = []
    voices = [PIPER, ESPEAK]
    for i, text in enumerate(COMPLETE):
        for v, voice in enumerate(voices):
            clips.append({
                "id": f"complete-{i + 1:02d}-{voice_tag(voice)}",
                "category": "complete",
                "voice": voice,
                "context": None,
                "caller": [{"text": text, "gap_before_ms": LEAD_MS}],
            })
    n = len(PAUSED) * len(voices)
    k = 0
    for i, segments in enumerate(PAUSED):
        for v, voice in enumerate(voices):
            # Thinking pauses of 0.5 to 2.0 s; the second voice walks the range backwards
            # so each sentence is heard with a short and a long pause.
            pause = spread(k if v == 0 else n - 1 - k, n, 500, 2000)
            k += 1
            caller = []
            for s, text in enumerate(segments):
                if s == 0:
                    gap = LEAD_MS
                elif text in FILLERS:
                    gap = pause
                elif segments[s - 1] in FILLERS:
                    # After a filler the speaker goes on sooner, but still past the 200 ms
                    # a short-pause detector looks at.
                    gap = max(300, pause // 2)
                else:
                    gap = pause
                caller.append({"text": text, "gap_before_ms": gap})
            clips.append({
                "id": f"pause-{i + 1:02d}-{voice_tag(voice)}",
                "category": "pause",
                "voice": voice,
                "context": None,
                "caller": caller,
            })
    n = len(DICTATED) * len(voices)
    k = 0
    for i, (asked, expects, groups) in enumerate(DICTATED):
        for v, voice in enumerate(voices):
            caller = []
            for g, text in enumerate(groups):
                # Pauses of 0.6 to 1.5 s between groups, different at every gap.
                gap = LEAD_MS if g == 0 else spread((k * 3 + g * 7) % n, n, 600, 1500)
                caller.append({"text": text, "gap_before_ms": gap})
            k += 1
            clips.append({
                "id": f"dictation-{expects}-{i + 1:02d}-{voice_tag(voice)}",
                "category": "dictation",
                "voice": voice,
                "context": {"agent_asked": asked, "expects": expects},
                "caller": caller,
            })
    # Backchannels over the agent: three takes per word (two voices, then one take
    # that says it twice, as a listener does during a long sentence).
    for i, word in enumerate(BACKCHANNELS):
        for take in range(3):
            voice = [PIPER, ESPEAK, ESPEAK_F if i % 2 else PIPER][take]
            onset = spread((i * 3 + take) % 21, 21, 700, 2500)
            caller = [{"text": word, "gap_before_ms": onset}]
            if take == 2:
                caller.append({"text": word, "gap_before_ms": 1400})
            clips.append({
                "id": f"backchannel-{i + 1:02d}{'abc'[take]}-{voice_tag(voice)}",
                "category": "backchannel",
                "voice": voice,
                "context": None,
                "agent": {"line": AGENT_LINE, "start_ms": 0, "end_ms": 5500},
                "caller": caller,
            })
    for i, text in enumerate(INTERRUPTIONS):
        for take in range(3):
            voice = [PIPER, ESPEAK, ESPEAK_F if i % 2 else PIPER][take]
            onset = spread((i * 3 + take) % 21, 21, 800, 2400)
            clips.append({
                "id": f"interruption-{i + 1:02d}{'abc'[take]}-{voice_tag(voice)}",
                "category": "interruption",
                "voice": voice,
                "context": None,
                "agent": {"line": AGENT_LINE, "start_ms": 0, "end_ms": 7000},
                "caller": [{"text": text, "gap_before_ms": onset}],
            })
    return clips


def voice_tag(voice):
    """Short name of a voice for clip ids."""
    return {PIPER: "piper", ESPEAK: "espeak", ESPEAK_F: "espeakf"}[voice]
