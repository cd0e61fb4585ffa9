//! `VOXLINE_RECORDINGS_URL`, parsed: a local directory (`file:///…`) or an
//! S3 bucket with an optional key prefix (`s3://bucket/prefix`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Where recordings are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordingsLocation {
    /// A directory on this machine (the single-node default).
    Local(PathBuf),
    /// An S3-compatible bucket.
    S3 {
        /// The bucket's name.
        bucket: String,
        /// Key prefix inside the bucket, without leading or trailing `/`; may be empty.
        prefix: String,
        /// `AWS_*` settings (lowercased names, as `AmazonS3Builder::from_env`
        /// reads them), captured once when settings are resolved.
        options: Vec<(String, String)>,
    },
}

/// Why a recordings URL was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "recordings URL {url:?} {reason}; expected file:///absolute/directory or s3://bucket[/prefix]"
)]
pub struct RecordingsLocationError {
    url: String,
    reason: &'static str,
}

impl RecordingsLocation {
    /// The default: `recordings/` in the data directory.
    pub fn in_data_dir(data_dir: &std::path::Path) -> Self {
        Self::Local(data_dir.join("recordings"))
    }

    /// This location with the process's `AWS_*` variables as S3 options
    /// (a local location is returned as is).
    pub fn with_aws_environment(self) -> Self {
        match self {
            Self::S3 { bucket, prefix, .. } => Self::S3 {
                bucket,
                prefix,
                options: std::env::vars()
                    .filter(|(name, _)| name.starts_with("AWS_"))
                    .map(|(name, value)| (name.to_ascii_lowercase(), value))
                    .collect(),
            },
            local => local,
        }
    }
}

/// A bucket name S3 accepts: 3 to 63 lowercase letters, digits, `.` and `-`,
/// starting and ending with a letter or digit.
fn is_bucket_name(name: &str) -> bool {
    let edge = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (3..=63).contains(&name.len())
        && name.chars().all(|c| edge(c) || c == '.' || c == '-')
        && name.starts_with(edge)
        && name.ends_with(edge)
}

impl FromStr for RecordingsLocation {
    type Err = RecordingsLocationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refuse = |reason| RecordingsLocationError {
            url: text.to_string(),
            reason,
        };
        let text = text.trim();
        if let Some(path) = text.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(refuse("does not name an absolute directory"));
            }
            return Ok(Self::Local(PathBuf::from(path)));
        }
        let Some(rest) = text.strip_prefix("s3://") else {
            return Err(refuse("has an unknown scheme"));
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if !is_bucket_name(bucket) {
            return Err(refuse("does not name a valid bucket"));
        }
        let prefix = prefix.trim_matches('/');
        if prefix
            .split('/')
            .any(|part| part.is_empty() && !prefix.is_empty())
            || object_store::path::Path::parse(prefix).is_err()
        {
            return Err(refuse("has an invalid key prefix"));
        }
        Ok(Self::S3 {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            options: Vec::new(),
        })
    }
}

impl fmt::Display for RecordingsLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local(dir) => write!(f, "file://{}", dir.display()),
            Self::S3 { bucket, prefix, .. } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            Self::S3 { bucket, prefix, .. } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s3(bucket: &str, prefix: &str) -> RecordingsLocation {
        RecordingsLocation::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
            options: Vec::new(),
        }
    }

    #[test]
    fn urls_name_a_directory_or_a_bucket_and_prefix() {
        assert_eq!("s3://calls".parse(), Ok(s3("calls", "")));
        assert_eq!("s3://calls/".parse(), Ok(s3("calls", "")));
        assert_eq!(
            "s3://my-calls.eu/prod/recordings/".parse(),
            Ok(s3("my-calls.eu", "prod/recordings"))
        );
        assert_eq!(
            "file:///var/lib/voxline/recordings".parse(),
            Ok(RecordingsLocation::Local(PathBuf::from(
                "/var/lib/voxline/recordings"
            )))
        );
        for bad in [
            "",
            "recordings",
            "/var/recordings",
            "file://relative/dir",
            "http://bucket",
            "s3://",
            "s3://ab",
            "s3://Upper",
            "s3://-bucket",
            "s3://bucket/a//b",
            "gs://bucket",
        ] {
            let err = bad.parse::<RecordingsLocation>().unwrap_err();
            assert!(
                err.to_string().contains("s3://bucket[/prefix]"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn locations_print_as_their_url() {
        assert_eq!(s3("calls", "a/b").to_string(), "s3://calls/a/b");
        assert_eq!(s3("calls", "").to_string(), "s3://calls");
    }
}
