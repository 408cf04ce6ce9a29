//! One module per page: the overview of every lock, one lock's queue, and ZooKeeper sessions.

pub mod lock;
pub mod overview;
pub mod sessions;
