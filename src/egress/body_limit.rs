//! Reading an answer from an outside server without trusting its size: the
//! body is read as it streams and given up past a bound, so a huge or endless
//! answer costs at most the bound in memory.

/// Why a bounded body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body is longer than the bound.
    #[error("response larger than {limit} bytes")]
    TooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
    /// The connection failed (or timed out) while the body streamed.
    #[error("reading the response: {0}")]
    Read(#[from] reqwest::Error),
}

/// Reads `response`'s body, failing as soon as it exceeds `limit` bytes.
pub async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, BodyError> {
    let too_large = BodyError::TooLarge { limit };
    // A declared length over the bound fails before anything is read.
    if response
        .content_length()
        .is_some_and(|len| usize::try_from(len).map_or(true, |len| len > limit))
    {
        return Err(too_large);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Err(too_large);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
