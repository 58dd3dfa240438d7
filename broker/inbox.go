package broker

import "context"

// Inbox is receiver-side deduplication, as Processor.Inbox uses it: Process
// runs fn unless id was already processed successfully, in which case it
// returns duplicate = true without calling fn; fn's error leaves id
// unprocessed, so a redelivery runs it again. queue.MemoryInbox and the
// durable inboxes of the queue's SQL stores (queue.InboxStore) are Inboxes.
type Inbox interface {
	Process(ctx context.Context, id string, fn func(ctx context.Context) error) (duplicate bool, err error)
}
