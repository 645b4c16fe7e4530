package admin

import "context"

// NamespaceFaults returns where namespace ns's shared settings do not
// apply, as [Tenant.Faults] says it on the tenants and tenant pages: its
// settings row's fault (a row no node can read) and each live node's
// report of its settings as not applied; "" when they apply everywhere.
// Pages that show one namespace's rows (its dead letters, its audit
// trail) show it too, so a bad setting is seen wherever the namespace is.
// Two store calls: ListSettings (at most [outbox.MaxSettings] rows) and
// NodeReports (O(nodes)).
func NamespaceFaults(ctx context.Context, s Store, ns string) (string, error) {
	t := Tenant{Namespace: ns}
	list, _, err := listSettings(ctx, s)
	if err != nil {
		return "", err
	}
	for _, set := range list {
		if set.Namespace == ns {
			t.Settings = set
		}
	}
	reps, err := s.NodeReports(ctx)
	if err != nil {
		return "", err
	}
	for _, r := range reps {
		for _, f := range r.BadSettings {
			if f.Namespace == ns {
				t.addFault(r.Node, f)
			}
		}
	}
	t.settle()
	return t.Faults, nil
}

// faultsOf is NamespaceFaults for a page filtered to ns, "" for none.
func faultsOf(ctx context.Context, s Store, ns string) (string, error) {
	if ns == "" {
		return "", nil
	}
	return NamespaceFaults(ctx, s, ns)
}
