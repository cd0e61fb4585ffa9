//! The post-call pipeline: work that runs on a call after it ended, from a
//! durable job claimed with a lease (ratings today).

pub mod ratings;
