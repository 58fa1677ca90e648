// Package model holds holdfast's domain types: jobs, runs, their attempts and the live runs a
// sweep reads, with their statuses, kinds and triggers, and the scheduler's slot decisions. It
// is a leaf: the store reads and writes these types, and the pure deciders (schedule, job,
// reconcile's decision table) take and return them without importing the database. See
// docs/ARCHITECTURE.md, Data model.
package model
