//! Work no request waits for: periodic upkeep (number renewals, agent
//! dormancy, retention) and the one worker of the leased jobs (post-call
//! analyses and ratings, webhook deliveries).

pub mod janitor;
pub mod leased_worker;
