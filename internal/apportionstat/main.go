// Command apportionstat measures how far per-node ceilings overshoot a
// cluster-wide quota under the two apportionments of the backpressure
// package, [backpressure.ApportionCeil] and [backpressure.ApportionShares]:
// the distribution of Σ ceilings / q over random partitions of the shards,
// as hashing memberships produce them, and over contiguous ranges. It
// prints a markdown table.
//
// Usage:
//
//	go run ./internal/apportionstat [-trials N] [-seed N] [-shards S] [-nodes 3,10,63] [-quotas 1,7,10,20,100] [-only uniform,ring]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

func main() {
	os.Exit(runArgs(os.Args[1:], os.Stdout, os.Stderr))
}

// runArgs is the command with its arguments and outputs; it returns the
// exit status: 0, 1 for a failed measurement, 2 for bad flags.
func runArgs(args []string, stdout, stderr io.Writer) int {
	cfg := DefaultConfig()
	fl := flag.NewFlagSet("apportionstat", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.IntVar(&cfg.Trials, "trials", cfg.Trials, "partitions per membership and node count")
	fl.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the random partitions")
	fl.IntVar(&cfg.Shards, "shards", cfg.Shards, "size of the virtual shard space")
	fl.Func("nodes", "comma-separated node counts (default 3,10,63)", func(s string) (err error) {
		cfg.Nodes, err = ints(s)
		return err
	})
	fl.Func("quotas", "comma-separated quotas (default 1,7,10,20,100)", func(s string) (err error) {
		cfg.Quotas, err = ints(s)
		return err
	})
	fl.Func("only", "comma-separated memberships: uniform, rendezvous, ring, ranges (default all)", func(s string) error {
		cfg.Only = strings.Split(s, ",")
		return nil
	})
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if err := run(stdout, cfg); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func ints(s string) ([]int, error) {
	var v []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		v = append(v, n)
	}
	return v, nil
}
