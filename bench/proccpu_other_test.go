//go:build !unix

package bench

import "time"

// processCPU returns -1: getrusage is Unix's, and the figures that need it
// are not reported elsewhere.
func processCPU() time.Duration { return -1 }
