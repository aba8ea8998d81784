//! Integration tests against a real PostgreSQL, started by the harness. One binary with
//! modules, so the cluster is started once per run.

mod backfill;
mod bad_input;
mod bounded_memory;
mod cache_safety;
mod checkpoint;
mod crash_suite;
mod debezium_feeds;
mod demo;
mod estates_source;
mod exact_values;
mod failover;
mod faults;
mod first_load;
mod grains;
mod harness;
mod hostile_campaign;
mod merge;
mod observability;
mod outage;
mod pipeline;
mod pipelines;
mod plugins;
mod postgres_source;
mod resync;
mod secrets;
mod source_types;
mod stage_crash;
mod streaming;
mod target_writes;
mod tls;
mod writers;
