// Package sqlitestore is an OutboxStore.
package sqlitestore
