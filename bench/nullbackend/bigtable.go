package main

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// Bigtable (google.bigtable.v2.Bigtable): MutateRows, and the table admin calls the sink makes
// (google.bigtable.admin.v2.BigtableTableAdmin GetTable, and CreateTable under
// CREATE_IF_NEEDED). Every table exists.
//
// Field numbers: MutateRowsRequest{table_name=1, entries=2}, MutateRowsResponse{entries=1},
// its Entry{index=1, status=2}, GetTableRequest{name=1}, CreateTableRequest{parent=1,
// table_id=2}, Table{name=1}.
const (
	bigtableService = "/google.bigtable.v2.Bigtable/"
	bigtableAdmin   = "/google.bigtable.admin.v2.BigtableTableAdmin/"
)

func registerBigtable(h map[string]handler) {
	// A server-streaming call: one request, here one response.
	h[bigtableService+"MutateRows"] = unary(bigtableService+"MutateRows", mutateRows)
	h[bigtableAdmin+"GetTable"] = unary(bigtableAdmin+"GetTable", getBigtableTable)
	h[bigtableAdmin+"CreateTable"] = unary(bigtableAdmin+"CreateTable", createBigtableTable)
}

// mutateRows answers one status per entry: OK, or INVALID_ARGUMENT for an entry with the
// reject marker (Bigtable names the failed entries; the others are applied), or, under a
// per-entry quota rule in its window, RESOURCE_EXHAUSTED for some entries (not applied).
func mutateRows(s *server, cfg *config, req []byte) ([]byte, error) {
	var table string
	var entries, refused, exhausted int64
	resp := make([]byte, 0, 256)
	var entry []byte
	method := bigtableService + "MutateRows"
	q := cfg.QuotaErrors
	quota := q.perEntry(method) && q.window(method)
	err := eachField(req, func(f field) bool {
		switch f.num {
		case 1:
			table = string(f.bytes)
		case 2:
			entry = appendVarint(entry[:0], 1, uint64(entries))
			if cfg.marked(f.bytes) {
				entry = appendStatus(entry, 2, uint32(codes.InvalidArgument),
					"null backend: the entry contains the reject marker")
				refused++
			} else if quota && q.draw(method) {
				entry = appendBytes(entry, 2, q.encodedStatus(method))
				exhausted++
			} else {
				entry = appendStatus(entry, 2, 0, "")
			}
			resp = protowire.AppendTag(resp, 1, protowire.BytesType)
			resp = protowire.AppendBytes(resp, entry)
			entries++
		}
		return true
	})
	if err != nil || table == "" {
		return nil, status.Error(codes.InvalidArgument, "null backend: MutateRows without a table")
	}
	if refused > 0 {
		s.counts.refusedRecords("bigtable", table, refused)
	}
	if exhausted > 0 {
		s.counts.failedCall(method)
	}
	s.counts.accepted("bigtable", table, entries-refused-exhausted)
	return resp, nil
}

func getBigtableTable(_ *server, _ *config, req []byte) ([]byte, error) {
	name, err := stringField(req, 1)
	if err != nil || name == "" {
		return nil, status.Error(codes.InvalidArgument, "null backend: GetTable without a name")
	}
	return appendString(nil, 1, name), nil
}

func createBigtableTable(_ *server, _ *config, req []byte) ([]byte, error) {
	var parent, id string
	err := eachField(req, func(f field) bool {
		switch f.num {
		case 1:
			parent = string(f.bytes)
		case 2:
			id = string(f.bytes)
		}
		return true
	})
	if err != nil || parent == "" || id == "" {
		return nil, status.Error(codes.InvalidArgument, "null backend: CreateTable without parent or table_id")
	}
	return appendString(nil, 1, parent+"/tables/"+id), nil
}
