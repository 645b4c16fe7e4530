package pgstore

import "strings"

// OperateStatements returns the SQL of Namespaces and Routes by name, for the EXPLAIN
// test of operate_test.go.
func OperateStatements(s *Store) map[string]string {
	return map[string]string{
		"namespacesOne":  s.operateSQL(namespacesOneSQL),
		"namespacesPage": s.operateSQL(namespacesPageSQL),
		"routes":         s.operateSQL(strings.Replace(routesSQL, "{cmp}", ">=", 1)),
	}
}

// IndexRangesOnlySQL is what Namespaces and Routes run in their
// transaction before the read (see indexRangesOnly).
const IndexRangesOnlySQL = indexRangesOnlySQL
