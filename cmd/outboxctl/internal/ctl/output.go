package ctl

import (
	"io"
	"text/tabwriter"
	"time"
)

// now is c's clock: Config.Now, or the wall clock.
func (c Config) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// table is the tab writer of every human-readable table.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }
