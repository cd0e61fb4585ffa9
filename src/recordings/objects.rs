//! [`RecordingStore`]: finished recordings as objects, one per call, in the
//! configured object store; the node-local staging directory a live call
//! records into; and the files kept back when an upload finally failed.

use super::location::RecordingsLocation;
use crate::domain::{CallId, OrgId};
use backon::{ExponentialBuilder, Retryable};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::buffered::BufWriter;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{
    GetOptions, GetRange, GetResult, ObjectMeta, ObjectStore, ObjectStoreExt, RetryConfig,
};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Why a recording could not be stored, read or deleted.
#[derive(Debug, thiserror::Error)]
pub enum RecordingStoreError {
    /// The configured store could not be set up.
    #[error("recordings store {location}: {source}")]
    Open {
        /// The configured location.
        location: String,
        /// What the object store said.
        source: object_store::Error,
    },
    /// The configured store's local directory could not be created.
    #[error("recordings directory {path}: {source}")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The object store refused or failed an operation on an object.
    #[error("recording {key}: {source}")]
    Object {
        /// The object's key.
        key: String,
        /// What the object store said.
        source: object_store::Error,
    },
    /// A local recording file could not be read, moved or removed.
    #[error("recording file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A stored key is not an object key (a row written by hand, say).
    #[error("{0:?} is not a recording key")]
    Key(String),
}

type Result<T, E = RecordingStoreError> = std::result::Result<T, E>;

/// A recording's key in the store: `{org_id}/{call_id}.{format}`, the same on
/// every node and under every store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingKey(ObjectPath);

impl RecordingKey {
    /// The key of a call's recording in `format` (`wav`, `ogg`).
    pub fn for_call(org_id: OrgId, call_id: CallId, format: &str) -> Self {
        Self(ObjectPath::from_iter([
            org_id.to_string(),
            format!("{call_id}.{format}"),
        ]))
    }

    /// A key as a recording row stores it.
    pub fn stored(text: &str) -> Result<Self> {
        ObjectPath::parse(text)
            .ok()
            .filter(|path| path.parts().count() > 0)
            .map(Self)
            .ok_or_else(|| RecordingStoreError::Key(text.to_string()))
    }

    /// The key as text, as the recording row stores it.
    pub fn as_str(&self) -> &str {
        self.0.as_ref()
    }
}

impl std::fmt::Display for RecordingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Upload attempts at our level; the S3 client retries each request too,
/// within [`s3_retries`], so a store that is down is given up on in about a
/// minute instead of holding the call's end for object_store's default three.
fn upload_attempts() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(Duration::from_secs(4))
        .with_max_times(3)
}

/// The S3 client's own retries of one request.
fn s3_retries() -> RetryConfig {
    RetryConfig {
        max_retries: 3,
        retry_timeout: Duration::from_secs(15),
        ..RetryConfig::default()
    }
}

/// Finished recordings in the configured object store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RecordingStore {
    objects: Arc<dyn ObjectStore>,
    /// The store itself when it is a local directory: a finished file is
    /// moved into it rather than copied, which keeps the single node's end of
    /// call as cheap as before.
    local: Option<Arc<LocalFileSystem>>,
    /// Where this node's live calls record.
    staging: PathBuf,
    /// Where this node keeps recordings whose upload finally failed.
    unsent: PathBuf,
}

impl RecordingStore {
    /// Opens the store at `location`; live calls stage and failed uploads
    /// wait in `data_dir`.
    pub fn open(location: &RecordingsLocation, data_dir: &Path) -> Result<Self> {
        let (objects, local): (Arc<dyn ObjectStore>, _) = match location {
            RecordingsLocation::Local(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| RecordingStoreError::Directory {
                    path: dir.clone(),
                    source,
                })?;
                let local = Arc::new(LocalFileSystem::new_with_prefix(dir).map_err(|source| {
                    RecordingStoreError::Open {
                        location: location.to_string(),
                        source,
                    }
                })?);
                (local.clone(), Some(local))
            }
            RecordingsLocation::S3 {
                bucket,
                prefix,
                options,
            } => {
                let mut builder = AmazonS3Builder::new();
                // As `AmazonS3Builder::from_env` does, from the variables
                // captured when the settings were resolved.
                for (name, value) in options {
                    if let Ok(key) = name.parse::<AmazonS3ConfigKey>() {
                        builder = builder.with_config(key, value);
                    }
                }
                let s3 = builder
                    .with_url(format!("s3://{bucket}"))
                    .with_retry(s3_retries())
                    .build()
                    .map_err(|source| RecordingStoreError::Open {
                        location: location.to_string(),
                        source,
                    })?;
                let objects: Arc<dyn ObjectStore> = if prefix.is_empty() {
                    Arc::new(s3)
                } else {
                    Arc::new(PrefixStore::new(s3, prefix.as_str()))
                };
                (objects, None)
            }
        };
        Ok(Self {
            objects,
            local,
            staging: data_dir.join("recordings-staging"),
            unsent: data_dir.join("recordings-unsent"),
        })
    }

    /// The local file a live call of `org_id` records `call_id` into, its
    /// directory created.
    pub fn staging_file(&self, org_id: OrgId, call_id: CallId, format: &str) -> Result<PathBuf> {
        let dir = self.staging.join(org_id.to_string());
        std::fs::create_dir_all(&dir).map_err(|source| RecordingStoreError::File {
            path: dir.clone(),
            source,
        })?;
        Ok(dir.join(format!("{call_id}.{format}")))
    }

    /// Stores the finished `file` under `key`, retrying, and removes the
    /// file; returns the object's size. On failure the file is left where it is.
    pub async fn upload(&self, file: &Path, key: &RecordingKey) -> Result<u64> {
        (|| self.put_file(file, key))
            .retry(upload_attempts())
            .when(|err| !matches!(err, RecordingStoreError::Key(_)))
            .notify(|err, wait| {
                tracing::warn!(key = %key, error = %err, retry_in = ?wait, "recording upload failed; retrying");
            })
            .await
    }

    /// Moves a file whose upload finally failed out of staging, to be tried
    /// again by [`RecordingStore::upload_unsent`]; returns where it now is.
    pub async fn keep_unsent(&self, file: &Path, key: &RecordingKey) -> Result<PathBuf> {
        let kept = self.unsent.join(key.as_str());
        if let Some(dir) = kept.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|source| RecordingStoreError::File {
                    path: dir.to_path_buf(),
                    source,
                })?;
        }
        tokio::fs::rename(file, &kept)
            .await
            .map_err(|source| RecordingStoreError::File {
                path: file.to_path_buf(),
                source,
            })?;
        Ok(kept)
    }

    /// Tries once more to upload each recording kept back by
    /// [`RecordingStore::keep_unsent`]; returns how many went.
    pub async fn upload_unsent(&self) -> Result<u32> {
        let mut sent = 0;
        let mut orgs = match tokio::fs::read_dir(&self.unsent).await {
            Ok(orgs) => orgs,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(source) => {
                return Err(RecordingStoreError::File {
                    path: self.unsent.clone(),
                    source,
                });
            }
        };
        let listing = |path: &Path| {
            let path = path.to_path_buf();
            move |source| RecordingStoreError::File { path, source }
        };
        while let Some(org) = orgs.next_entry().await.map_err(listing(&self.unsent))? {
            let org_dir = org.path();
            let mut files = tokio::fs::read_dir(&org_dir)
                .await
                .map_err(listing(&org_dir))?;
            while let Some(file) = files.next_entry().await.map_err(listing(&org_dir))? {
                let (org_name, file_name) = (org.file_name(), file.file_name());
                let (Some(org_name), Some(file_name)) = (org_name.to_str(), file_name.to_str())
                else {
                    continue;
                };
                let Ok(key) = RecordingKey::stored(&format!("{org_name}/{file_name}")) else {
                    tracing::warn!(file = %file.path().display(), "not a kept recording; left alone");
                    continue;
                };
                match self.put_file(&file.path(), &key).await {
                    Ok(_) => sent += 1,
                    Err(err) => {
                        tracing::warn!(key = %key, error = %err, "kept recording still not uploaded");
                    }
                }
            }
        }
        Ok(sent)
    }

    /// One attempt at storing `file` under `key`; the file is gone after success.
    async fn put_file(&self, file: &Path, key: &RecordingKey) -> Result<u64> {
        let file_error = |source| RecordingStoreError::File {
            path: file.to_path_buf(),
            source,
        };
        if let Some(local) = &self.local {
            let target = local
                .path_to_filesystem(&key.0)
                .map_err(|source| self.object_error(key, source))?;
            if let Some(dir) = target.parent() {
                tokio::fs::create_dir_all(dir).await.map_err(file_error)?;
            }
            match tokio::fs::rename(file, &target).await {
                Ok(()) => {
                    let meta = tokio::fs::metadata(&target).await.map_err(file_error)?;
                    return Ok(meta.len());
                }
                // Another file system: copy through the store below.
                Err(err) if err.kind() == std::io::ErrorKind::CrossesDevices => {}
                Err(err) => return Err(file_error(err)),
            }
        }
        let mut source = tokio::fs::File::open(file).await.map_err(file_error)?;
        let mut sink = BufWriter::new(Arc::clone(&self.objects), key.0.clone());
        let copied = match tokio::io::copy(&mut source, &mut sink).await {
            Ok(copied) => copied,
            Err(err) => {
                // Reading the file or writing a part failed: drop the parts sent.
                let _ = sink.abort().await;
                return Err(file_error(err));
            }
        };
        // A failed shutdown (the last part or the completion) leaves nothing
        // to abort: the writer is spent.
        sink.shutdown().await.map_err(file_error)?;
        tokio::fs::remove_file(file).await.map_err(file_error)?;
        Ok(copied)
    }

    fn object_error(&self, key: &RecordingKey, source: object_store::Error) -> RecordingStoreError {
        RecordingStoreError::Object {
            key: key.to_string(),
            source,
        }
    }

    /// The object's size and version; None when there is no such object.
    pub async fn metadata(&self, key: &RecordingKey) -> Result<Option<ObjectMeta>> {
        match self.objects.head(&key.0).await {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(self.object_error(key, source)),
        }
    }

    /// The object's bytes in `range` (all when None); None when there is no
    /// such object.
    pub async fn read(
        &self,
        key: &RecordingKey,
        range: Option<Range<u64>>,
    ) -> Result<Option<GetResult>> {
        let options = GetOptions {
            range: range.map(GetRange::Bounded),
            ..GetOptions::default()
        };
        match self.objects.get_opts(&key.0, options).await {
            Ok(found) => Ok(Some(found)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(self.object_error(key, source)),
        }
    }

    /// Deletes the object; one already gone is no error.
    pub async fn delete(&self, key: &RecordingKey) -> Result<()> {
        match self.objects.delete(&key.0).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(self.object_error(key, source)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_workspace_and_the_calls_file() {
        let org = OrgId::new();
        let call = CallId::new();
        let key = RecordingKey::for_call(org, call, "wav");
        assert_eq!(key.as_str(), format!("{org}/{call}.wav"));
        assert_eq!(RecordingKey::stored(key.as_str()).unwrap(), key);
        assert!(RecordingKey::stored("").is_err());
        assert!(RecordingKey::stored("a//b").is_err());
    }

    #[tokio::test]
    async fn a_local_store_moves_the_staged_file_in_and_reads_ranges() {
        let data = tempfile::tempdir().unwrap();
        let root = data.path().join("recordings");
        let store =
            RecordingStore::open(&RecordingsLocation::Local(root.clone()), data.path()).unwrap();
        let (org, call) = (OrgId::new(), CallId::new());
        let staged = store.staging_file(org, call, "wav").unwrap();
        std::fs::write(&staged, (0..100u8).collect::<Vec<_>>()).unwrap();
        let key = RecordingKey::for_call(org, call, "wav");
        assert_eq!(store.upload(&staged, &key).await.unwrap(), 100);
        assert!(!staged.exists());
        assert!(
            root.join(org.to_string())
                .join(format!("{call}.wav"))
                .exists()
        );
        assert_eq!(store.metadata(&key).await.unwrap().unwrap().size, 100);
        let part = store.read(&key, Some(10..20)).await.unwrap().unwrap();
        let bytes = part.bytes().await.unwrap().to_vec();
        assert_eq!(bytes, (10..20u8).collect::<Vec<_>>());
        store.delete(&key).await.unwrap();
        store.delete(&key).await.unwrap();
        assert!(store.metadata(&key).await.unwrap().is_none());
        assert!(store.read(&key, None).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_failed_upload_keeps_the_file_for_a_later_try() {
        let data = tempfile::tempdir().unwrap();
        let root = data.path().join("recordings");
        let store =
            RecordingStore::open(&RecordingsLocation::Local(root.clone()), data.path()).unwrap();
        let (org, call) = (OrgId::new(), CallId::new());
        let staged = store.staging_file(org, call, "wav").unwrap();
        std::fs::write(&staged, b"RIFF").unwrap();
        let key = RecordingKey::for_call(org, call, "wav");
        // The workspace's directory in the store is a file: every try fails.
        std::fs::write(root.join(org.to_string()), b"in the way").unwrap();
        assert!(store.upload(&staged, &key).await.is_err());
        assert!(
            staged.exists(),
            "the staged file stays after a failed upload"
        );
        let kept = store.keep_unsent(&staged, &key).await.unwrap();
        assert_eq!(std::fs::read(&kept).unwrap(), b"RIFF");
        assert_eq!(store.upload_unsent().await.unwrap(), 0);
        assert!(kept.exists());
        std::fs::remove_file(root.join(org.to_string())).unwrap();
        assert_eq!(store.upload_unsent().await.unwrap(), 1);
        assert!(!kept.exists());
        assert_eq!(store.metadata(&key).await.unwrap().unwrap().size, 4);
    }
}
