//! Where finished call recordings live: an object store shared by every node
//! (`object_store`: a local directory by default, S3-compatible storage for
//! several nodes), addressed by a stable key per call. A call records to a
//! local staging file on the node that runs it; the runner hands the finished
//! file to [`RecordingStore::upload`], reads and retention go by key.

pub mod location;
pub mod objects;
pub mod serve;

pub use location::{RecordingsLocation, RecordingsLocationError};
pub use objects::{RecordingKey, RecordingStore, RecordingStoreError};
