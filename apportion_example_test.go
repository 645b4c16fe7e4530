package backpressure_test

import (
	"fmt"

	"github.com/outboxkit/backpressure"
)

// Apportionments: a quota of 20 rows of one tenant over ten nodes that
// split 64 shards into runs of 7, 7, 7, 7, 7, 7, 6, 6, 6 and 4. Each node
// computes its ceiling from its own shards. The seed's rule rounds every
// node up and lets the cluster run 26 rows at once; shares run exactly 20,
// and every node still gets at least 1.
func ExampleOwnedShardFraction_CeilingFor() {
	sizes := []int{7, 7, 7, 7, 7, 7, 6, 6, 6, 4}
	next := 0
	sumCeil, sumShares := 0, 0
	for node, n := range sizes {
		var ids []int
		for ; n > 0; n-- {
			ids = append(ids, next)
			next++
		}
		f, err := backpressure.NewOwnedShardFraction(ids, 64)
		if err != nil {
			panic(err)
		}
		c := f.CeilingFor("acme", 20, backpressure.ApportionCeil)
		s := f.CeilingFor("acme", 20, backpressure.ApportionShares)
		fmt.Printf("node %d owns %v: ceil %d, shares %d\n", node, f, c, s)
		sumCeil += c
		sumShares += s
	}
	fmt.Printf("sum: ceil %d, shares %d\n", sumCeil, sumShares)
	// Output:
	// node 0 owns 7/64: ceil 3, shares 2
	// node 1 owns 7/64: ceil 3, shares 2
	// node 2 owns 7/64: ceil 3, shares 2
	// node 3 owns 7/64: ceil 3, shares 3
	// node 4 owns 7/64: ceil 3, shares 2
	// node 5 owns 7/64: ceil 3, shares 2
	// node 6 owns 6/64: ceil 2, shares 2
	// node 7 owns 6/64: ceil 2, shares 2
	// node 8 owns 6/64: ceil 2, shares 2
	// node 9 owns 4/64: ceil 2, shares 1
	// sum: ceil 26, shares 20
}
