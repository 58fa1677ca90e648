// Package model holds holdfast's domain types: jobs, runs, their attempts and the live runs a
// sweep reads, with their statuses, kinds and triggers, and the scheduler's slot decisions; and
// the records the store reads and writes: hosts and their leases, the ledger, the outbox, the
// snapshot inventory, retention plans, how attempts end, and what the watch, the metrics and
// admission read. It imports no database: the store reads and writes these types, and the pure
// deciders (schedule, job, reconcile's decision table) take and return them without importing
// the database. See docs/ARCHITECTURE.md, Data model.
package model
