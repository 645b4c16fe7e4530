package sqlitestore

import (
	"context"
	"database/sql"
)

// stmtKey is a hot statement: its text and the database it runs on.
type stmtKey struct {
	db *sql.DB
	q  string
}

// hotStatements lists the statements every sweep runs, each with and
// without the shard filter, with the database each runs on.
func (s *Store) hotStatements() []stmtKey {
	var out []stmtKey
	for _, cond := range []string{"", ownedCond(2)} {
		out = append(out, stmtKey{s.reader, countClaimedSQL(cond)})
		if !s.readOnly { // the writer's, for InSweepTx
			out = append(out, stmtKey{s.writer, countClaimedSQL(cond)})
		}
	}
	for _, cond := range []string{"", ownedCond(3)} {
		out = append(out, stmtKey{s.reader, countPendingSQL(cond)})
		for _, part := range []string{windowAfter, windowUpTo, windowRestOf} {
			out = append(out, stmtKey{s.reader, countPendingWindowSQL(cond, part, countOnly)})
		}
		if s.readOnly {
			continue
		}
		for _, m := range []countMode{countIDs, countFirstID} {
			out = append(out, stmtKey{s.writer, routeCountsSQL(cond, "", m)})
			for _, part := range []string{windowAfter, windowUpTo, windowRestOf} {
				out = append(out, stmtKey{s.writer, countPendingWindowSQL(cond, part, m)})
			}
		}
	}
	if s.readOnly {
		return out
	}
	for _, cond := range []string{"", ownedCond(7)} {
		out = append(out, stmtKey{s.writer, scopedClaimSQL(cond)}, stmtKey{s.writer, unscopedClaimSQL(cond)},
			stmtKey{s.writer, claimByIDSQL(cond)})
	}
	return append(out, stmtKey{s.writer, nextTokenSQL}, stmtKey{s.writer, completeSQL}, stmtKey{s.writer, pruneRoutesSQL})
}

// prepare prepares the hot statements, once, at Open. SQLite would
// otherwise parse and plan each of them again on every call, which costs
// about as much as running them. They are prepared up front, not on first
// use, because a first use can come inside a transaction that holds the
// writer's only connection.
func (s *Store) prepare(ctx context.Context) error {
	s.stmts = map[stmtKey]*sql.Stmt{}
	for _, k := range s.hotStatements() {
		if _, dup := s.stmts[k]; dup { // in memory, reader is writer
			continue
		}
		st, err := k.db.PrepareContext(ctx, k.q)
		if err != nil {
			return err
		}
		s.stmts[k] = st
	}
	return nil
}

// closeStmts closes the hot statements (Close).
func (s *Store) closeStmts() {
	for _, st := range s.stmts {
		_ = st.Close()
	}
}
