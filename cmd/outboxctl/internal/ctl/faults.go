package ctl

import (
	"context"
	"fmt"

	"github.com/outboxkit/backpressure/admin"
)

// printFaults prints, under a listing filtered to namespace ns (dead
// list, audit), where ns's shared settings do not apply
// (admin.NamespaceFaults), as tenants and why do: a bad setting is shown
// wherever its namespace is. It prints nothing for "" or when they apply.
func printFaults(ctx context.Context, c Config, s admin.Store, ns string) error {
	if ns == "" {
		return nil
	}
	faults, err := admin.NamespaceFaults(ctx, s, ns)
	if err != nil || faults == "" {
		return err
	}
	_, err = fmt.Fprintf(c.Stdout, "BAD: the shared settings of %s are not applied: %s\n", display(ns), displayText(faults))
	return err
}
