//! Robustness under concurrency that is easy to get wrong: older snapshots racing a drop,
//! lock ordering across capped queues and idempotency keys, and maintenance passes that must
//! not wait for each other or for a lock another session holds.
//!
//! Each test was seen failing against the broken variant named in its comment
//! (`JQ_TEST_BREAK=<name>` installs it in the test's own database).

mod drops;
mod held_locks;
mod lock_order;
mod maintenance;
mod validation;
