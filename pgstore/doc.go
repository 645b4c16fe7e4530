// Package pgstore is an OutboxStore.
package pgstore
