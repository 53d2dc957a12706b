//! Query plans are part of jq's contract. Every hot path is coupled to one partial index
//! (sql/schema.sql): the claim to jobs_claim_idx, promotion to jobs_scheduled_idx, reaping to
//! jobs_running_idx, retention to jobs_finished_idx / jobs_dead_idx and the idempotency lookup to
//! jobs_idempotency_idx. A partial index serves a query only while the query's predicate implies
//! the index predicate and a descending column only while its NULLS placement matches the ORDER
//! BY; nothing warns when they drift apart. These tests read the
//! plans.
//!
//! Two views of every hot path:
//! * The statement itself, copied from sql/claim.sql, sql/finish.sql or sql/maintenance.sql (`HotPath`). The copy
//!   is checked against the function's body in the catalogue first, so an edit of the function
//!   fails here until the copy is updated. Its plpgsql variables become $n parameters; it is
//!   PREPAREd and run with EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE under
//!   plan_cache_mode = force_custom_plan and force_generic_plan, because plpgsql switches to a
//!   cached generic plan after five calls.
//! * The function as it really runs: auto_explain (log_nested_statements, log_analyze, JSON,
//!   log_level = notice) sends the plan of every statement inside jq.claim / jq._promote / ... to
//!   the client, which reads it from the notices (`Traced`).
//!
//! Everything that executes is run in a transaction that is rolled back: the copied selections
//! take FOR UPDATE row locks, and the traced function calls change state (through jq functions,
//! but the data set has to stay as built for the next check). The data itself is built only
//! through jq functions (enqueue_many, enqueue, claim, complete_many, fail, cancel), then
//! ANALYZEd. auto_explain comes with Postgres (contrib, part of the Debian postgresql-15 package).
//!
//! Nothing here measures time: assertions are on node types, index names and actual row counts.

mod data;
mod plan_tree;
mod statements;
mod traced;

mod claim;
mod finish;
mod flow_control;
mod generic_plans;
mod growth;
mod maintenance;
mod observe;
mod tables;
