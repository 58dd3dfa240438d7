// Package queue is stagger's durable retry queue contract (seed 002): jobs
// with attempts, max_attempts, available_at and a deadline that is never
// extended, processed one claim at a time, with the retry decision shared
// with every other stagger driver. Stores live in their own modules
// (queue/sqlite, queue/postgres) and prove themselves against queue/queuetest.
package queue
