package main

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// Spanner (google.spanner.v1.Spanner): the session calls (CreateSession, BatchCreateSessions,
// DeleteSession), the INFORMATION_SCHEMA queries the sink reads its schema with (ExecuteSql,
// answered from the configured tables), and Commit. Every database exists.
//
// Field numbers: CreateSessionRequest{database=1}, BatchCreateSessionsRequest{database=1,
// session_count=3}, BatchCreateSessionsResponse{session=1}, Session{name=1},
// ExecuteSqlRequest{session=1, sql=3}, ResultSet{metadata=1, rows=2},
// ResultSetMetadata{row_type=1}, StructType{fields=1}, Field{name=1, type=2}, Type{code=1},
// ListValue{values=1}, Value{string_value=3}, CommitRequest{session=1, mutations=4},
// Mutation{insert=1, update=2, insert_or_update=3, replace=4, delete=5},
// Write{table=1, columns=2, values=3}, Delete{table=1, key_set=2}, KeySet{keys=1, ranges=2,
// all=3}, CommitResponse{commit_timestamp=1}, Timestamp{seconds=1, nanos=2}.
const spannerService = "/google.spanner.v1.Spanner/"

func registerSpanner(h map[string]handler) {
	h[spannerService+"CreateSession"] = unary(spannerService+"CreateSession", createSession)
	h[spannerService+"BatchCreateSessions"] = unary(spannerService+"BatchCreateSessions", batchCreateSessions)
	h[spannerService+"DeleteSession"] = unary(spannerService+"DeleteSession",
		func(_ *server, _ *config, _ []byte) ([]byte, error) { return []byte{}, nil })
	h[spannerService+"ExecuteSql"] = unary(spannerService+"ExecuteSql", executeSQL)
	h[spannerService+"Commit"] = unary(spannerService+"Commit", commit)
}

func (s *server) sessionName(database string) string {
	return database + "/sessions/" + strconv.FormatInt(s.ids.Add(1), 36)
}

func createSession(s *server, _ *config, req []byte) ([]byte, error) {
	database, err := stringField(req, 1)
	if err != nil || database == "" {
		return nil, status.Error(codes.InvalidArgument, "null backend: CreateSession without a database")
	}
	return appendString(nil, 1, s.sessionName(database)), nil
}

func batchCreateSessions(s *server, _ *config, req []byte) ([]byte, error) {
	var database string
	count := uint64(1)
	err := eachField(req, func(f field) bool {
		switch f.num {
		case 1:
			database = string(f.bytes)
		case 3:
			count = f.value
		}
		return true
	})
	if err != nil || database == "" {
		return nil, status.Error(codes.InvalidArgument, "null backend: BatchCreateSessions without a database")
	}
	var resp []byte
	for i := uint64(0); i < count; i++ {
		resp = appendBytes(resp, 1, appendString(nil, 1, s.sessionName(database)))
	}
	return resp, nil
}

// executeSQL answers the sink's three INFORMATION_SCHEMA queries from the configured schema,
// and any other statement with an empty result.
func executeSQL(_ *server, cfg *config, req []byte) ([]byte, error) {
	sql, err := stringField(req, 3)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	switch {
	case strings.Contains(sql, "INFORMATION_SCHEMA.INDEX_COLUMNS"):
		return cfg.spannerKeys, nil
	case strings.Contains(sql, "INFORMATION_SCHEMA.COLUMNS"):
		return cfg.spannerColumns, nil
	case strings.Contains(sql, "INFORMATION_SCHEMA.TABLES"):
		return cfg.spannerTables, nil
	}
	return []byte{}, nil
}

// resultSet encodes a ResultSet of string-typed columns (INT64 where named in ints).
func resultSet(columns []string, ints map[string]bool, rows [][]string) []byte {
	var rowType []byte
	for _, c := range columns {
		code := uint64(6) // STRING
		if ints[c] {
			code = 2 // INT64
		}
		f := appendString(nil, 1, c)
		f = appendBytes(f, 2, appendVarint(nil, 1, code))
		rowType = appendBytes(rowType, 1, f)
	}
	out := appendBytes(nil, 1, appendBytes(nil, 1, rowType))
	var list, value []byte
	for _, row := range rows {
		list = list[:0]
		for _, v := range row {
			value = appendString(value[:0], 3, v)
			list = appendBytes(list, 1, value)
		}
		out = appendBytes(out, 2, list)
	}
	return out
}

func encodeSpannerSchema(schema spannerSchema) (tables, columns, keys []byte) {
	var tableRows, columnRows, keyRows [][]string
	for _, t := range schema.Tables {
		tableRows = append(tableRows, []string{"", t})
		for _, c := range schema.Columns {
			columnRows = append(columnRows, []string{"", t, c.Name, c.Type, "NEVER"})
		}
		for i, k := range schema.Key {
			keyRows = append(keyRows, []string{"", t, "PRIMARY_KEY", "PRIMARY_KEY", k, strconv.Itoa(i + 1)})
		}
	}
	tables = resultSet([]string{"TABLE_SCHEMA", "TABLE_NAME"}, nil, tableRows)
	columns = resultSet([]string{"TABLE_SCHEMA", "TABLE_NAME", "COLUMN_NAME", "SPANNER_TYPE", "IS_GENERATED"}, nil, columnRows)
	keys = resultSet(
		[]string{"TABLE_SCHEMA", "TABLE_NAME", "INDEX_NAME", "INDEX_TYPE", "COLUMN_NAME", "ORDINAL_POSITION"},
		map[string]bool{"ORDINAL_POSITION": true}, keyRows)
	return tables, columns, keys
}

// commit counts the rows each mutation writes (or the keys it deletes) per table, keyed
// <database>/tables/<table>; a commit holding the reject marker is refused whole with
// INVALID_ARGUMENT, as Spanner refuses a commit with an invalid mutation.
func commit(s *server, cfg *config, req []byte) ([]byte, error) {
	var session string
	byTable := map[string]int64{}
	var walkErr error
	err := eachField(req, func(f field) bool {
		switch f.num {
		case 1:
			session = string(f.bytes)
		case 4:
			walkErr = eachField(f.bytes, func(m field) bool {
				if m.num < 1 || m.num > 5 || m.typ != protowire.BytesType {
					return true
				}
				table, rows, err := mutationRows(m.num == 5, m.bytes)
				if err != nil {
					walkErr = err
					return false
				}
				byTable[table] += rows
				return true
			})
			return walkErr == nil
		}
		return true
	})
	if err == nil {
		err = walkErr
	}
	if err != nil || session == "" {
		return nil, status.Error(codes.InvalidArgument, "null backend: malformed Commit")
	}
	database, _, _ := strings.Cut(session, "/sessions/")
	keyed := make(map[string]int64, len(byTable))
	for t, n := range byTable {
		keyed[database+"/tables/"+t] = n
	}
	if cfg.marker != nil && bytes.Contains(req, cfg.marker) {
		for t, n := range keyed {
			s.counts.refusedRecords("spanner", t, n)
		}
		return nil, status.Error(codes.InvalidArgument, "null backend: a mutation contains the reject marker")
	}
	s.counts.acceptedMany("spanner", keyed)
	now := time.Now()
	ts := appendVarint(nil, 1, uint64(now.Unix()))
	ts = appendVarint(ts, 2, uint64(now.Nanosecond()))
	return appendBytes(nil, 1, ts), nil
}

// mutationRows returns a Write's table and row count, or a Delete's table and key count.
func mutationRows(isDelete bool, msg []byte) (string, int64, error) {
	var table string
	var rows int64
	err := eachField(msg, func(f field) bool {
		switch {
		case f.num == 1:
			table = string(f.bytes)
		case !isDelete && f.num == 3:
			rows++
		case isDelete && f.num == 2:
			_ = eachField(f.bytes, func(k field) bool {
				if k.num == 1 || k.num == 2 {
					rows++
				}
				return true
			})
		}
		return true
	})
	return table, rows, err
}
