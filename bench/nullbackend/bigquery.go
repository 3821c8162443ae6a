package main

import (
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// BigQuery Storage Write (google.cloud.bigquery.storage.v1.BigQueryWrite): AppendRows on the
// default stream (a bidirectional stream, answered in order, each answer due its latency
// after its request, so requests pipeline as they do against the service), and the BUFFERED
// stream calls of WriteMethod.BUFFERED_STREAM: CreateWriteStream, AppendRows with offsets,
// FlushRows, FinalizeWriteStream; GetWriteStream on a default stream, the sink's table lookup
// (the REST table lookups are in http.go).
//
// Default-stream rows count when their request is answered; a BUFFERED stream's rows count
// when FlushRows makes them visible, as in BigQuery.
//
// Field numbers: AppendRowsRequest{write_stream=1, offset=2, proto_rows=4, arrow_rows=5},
// ProtoData{writer_schema=1, rows=2}, ProtoRows{serialized_rows=1}, ArrowData{writer_schema=1,
// rows=2}, ArrowRecordBatch{serialized_record_batch=1}, AppendRowsResponse{append_result=1,
// error=2, row_errors=4, write_stream=5}, AppendResult{offset=1}, RowError{index=1, code=2,
// message=3}, CreateWriteStreamRequest{parent=1, write_stream=2}, WriteStream{name=1, type=2,
// table_schema=5, location=8}, GetWriteStreamRequest{name=1, view=3},
// FlushRowsRequest{write_stream=1, offset=2}, FlushRowsResponse{offset=1},
// FinalizeWriteStreamRequest{name=1}, FinalizeWriteStreamResponse{row_count=1}.
const bqService = "/google.cloud.bigquery.storage.v1.BigQueryWrite/"

func registerBigQuery(h map[string]handler) {
	h[bqService+"AppendRows"] = appendRows
	h[bqService+"CreateWriteStream"] = unary(bqService+"CreateWriteStream", createWriteStream)
	h[bqService+"GetWriteStream"] = unary(bqService+"GetWriteStream", getWriteStream)
	h[bqService+"FlushRows"] = unary(bqService+"FlushRows", flushRows)
	h[bqService+"FinalizeWriteStream"] = unary(bqService+"FinalizeWriteStream", finalizeWriteStream)
}

// bufferedStream is a BUFFERED stream: rows appended (the next offset) and flushed.
type bufferedStream struct {
	mu        sync.Mutex
	table     string
	next      int64
	flushed   int64
	finalized bool
}

type bufferedStreams struct {
	mu sync.Mutex
	m  map[string]*bufferedStream
}

func newBufferedStreams() *bufferedStreams {
	return &bufferedStreams{m: map[string]*bufferedStream{}}
}

func (b *bufferedStreams) get(name string) *bufferedStream {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.m[name]
}

// tableOf is projects/p/datasets/d/tables/t of a stream name.
func tableOf(stream string) string {
	table, _, _ := strings.Cut(stream, "/streams/")
	return table
}

// answer is one AppendRows response waiting for its due time, with the rows it accepts.
type answer struct {
	due   time.Time
	resp  []byte
	table string
	rows  int64
	err   error // ends the stream (a fail rule)
}

func appendRows(s *server, stream grpc.ServerStream) error {
	method := bqService + "AppendRows"
	s.counts.streamOpened(method)
	defer s.counts.streamClosed(method)
	answers := make(chan answer, 1024)
	done := make(chan error, 1)
	go func() { // answers in order, each at its due time
		ctx := stream.Context()
		for a := range answers {
			if err := sleepUntil(ctx, a.due); err != nil {
				done <- err
				return
			}
			if a.err != nil {
				s.counts.failedCall(method)
				done <- a.err
				return
			}
			if err := stream.SendMsg(&frame{b: a.resp}); err != nil {
				done <- err
				return
			}
			s.counts.accepted("bigquery", a.table, a.rows)
		}
		done <- nil
	}()
	var last string // a request may leave write_stream out after the first
	for {
		var req frame
		err := stream.RecvMsg(&req)
		if err != nil {
			close(answers)
			sent := <-done
			if errors.Is(err, io.EOF) {
				return sent
			}
			return err
		}
		s.counts.call(method)
		cfg := s.settings.get()
		a := answer{due: time.Now().Add(cfg.latency)}
		if a.err = cfg.failure(method); a.err == nil {
			if q := cfg.QuotaErrors; q.failsCall(method) {
				// A quota error in the response: none of the request's rows are appended.
				s.counts.failedCall(method)
				if name, _ := stringField(req.b, 1); name != "" {
					last = name
				}
				a.resp = appendString(appendBytes(nil, 2, q.encodedStatus(method)), 5, last)
			} else {
				a.resp, a.table, a.rows, last = s.appendOne(cfg, req.b, last)
			}
		}
		select {
		case answers <- a:
		case err := <-done: // the answering side stopped (the client went away)
			close(answers)
			return err
		}
		if a.err != nil {
			close(answers)
			return <-done
		}
	}
}

// appendOne decides one AppendRows request: its response, and the table and rows it adds
// when answered (none for a BUFFERED stream, whose rows count at FlushRows).
func (s *server) appendOne(cfg *config, req []byte, last string) ([]byte, string, int64, string) {
	name := last
	var offset int64
	hasOffset := false
	var rows int64
	var rowErrors []int64
	arrowMarked := false
	err := eachField(req, func(f field) bool {
		switch f.num {
		case 1:
			name = string(f.bytes)
		case 2:
			hasOffset = true
			offset, _ = int64Wrapper(f.bytes)
		case 4: // ProtoData
			protoRows, _, _ := bytesField(f.bytes, 2)
			_ = eachField(protoRows, func(r field) bool {
				if r.num == 1 {
					if cfg.marked(r.bytes) {
						rowErrors = append(rowErrors, rows)
					}
					rows++
				}
				return true
			})
		case 5: // ArrowData
			batch, _, _ := bytesField(f.bytes, 2)
			serialized, _, _ := bytesField(batch, 1)
			n, err := arrowRows(serialized)
			if err != nil {
				return false
			}
			rows += n
			arrowMarked = arrowMarked || cfg.marked(serialized)
		}
		return true
	})
	reply := func(code codes.Code, message string) []byte {
		resp := appendStatus(nil, 2, uint32(code), message)
		for _, i := range rowErrors {
			e := appendVarint(nil, 1, uint64(i))
			e = appendVarint(e, 2, 1) // FIELDS_ERROR
			e = appendString(e, 3, "null backend: the row contains the reject marker")
			resp = appendBytes(resp, 4, e)
		}
		return appendString(resp, 5, name)
	}
	table := tableOf(name)
	switch {
	case err != nil:
		return reply(codes.InvalidArgument, "null backend: "+err.Error()), "", 0, name
	case name == "":
		return reply(codes.InvalidArgument, "null backend: AppendRows without write_stream"), "", 0, name
	case len(rowErrors) > 0 || arrowMarked:
		// BigQuery appends none of a request with a bad row. Arrow rows are refused whole:
		// finding the row would mean decoding the batch.
		s.counts.refusedRecords("bigquery", table, rows)
		return reply(codes.InvalidArgument, "null backend: rows contain the reject marker"), "", 0, name
	}
	if strings.HasSuffix(name, "/streams/_default") {
		return appendString(appendBytes(nil, 1, nil), 5, name), table, rows, name
	}
	st := s.streams.get(name)
	if st == nil {
		return reply(codes.NotFound, "null backend: no stream "+name), "", 0, name
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.finalized:
		return reply(codes.FailedPrecondition, "null backend: stream finalized"), "", 0, name
	case hasOffset && offset < st.next:
		return reply(codes.AlreadyExists, "null backend: offset already appended"), "", 0, name
	case hasOffset && offset > st.next:
		return reply(codes.OutOfRange, "null backend: offset beyond the stream's end"), "", 0, name
	}
	at := st.next
	st.next += rows
	result := appendInt64Value(nil, 1, at)
	return appendString(appendBytes(nil, 1, result), 5, name), table, 0, name
}

func createWriteStream(s *server, _ *config, req []byte) ([]byte, error) {
	var parent string
	var typ uint64 = 1 // COMMITTED
	err := eachField(req, func(f field) bool {
		switch f.num {
		case 1:
			parent = string(f.bytes)
		case 2:
			_ = eachField(f.bytes, func(w field) bool {
				if w.num == 2 {
					typ = w.value
				}
				return true
			})
		}
		return true
	})
	if err != nil || parent == "" {
		return nil, status.Error(codes.InvalidArgument, "null backend: CreateWriteStream without a parent")
	}
	name := parent + "/streams/nb" + strconv.FormatInt(s.ids.Add(1), 36)
	s.streams.mu.Lock()
	s.streams.m[name] = &bufferedStream{table: parent}
	s.streams.mu.Unlock()
	return appendVarint(appendString(nil, 1, name), 2, typ), nil
}

// storageTypes maps the REST type names of bigquery_schema to TableFieldSchema.Type.
var storageTypes = map[string]uint64{
	"STRING": 1, "INTEGER": 2, "INT64": 2, "FLOAT": 3, "FLOAT64": 3, "RECORD": 4, "STRUCT": 4,
	"BYTES": 5, "BOOLEAN": 6, "BOOL": 6, "TIMESTAMP": 7, "DATE": 8, "TIME": 9, "DATETIME": 10,
	"GEOGRAPHY": 11, "NUMERIC": 12, "BIGNUMERIC": 13, "INTERVAL": 14, "JSON": 15,
}

// storageModes maps REST modes to TableFieldSchema.Mode.
var storageModes = map[string]uint64{"NULLABLE": 1, "REQUIRED": 2, "REPEATED": 3}

// tableFieldSchemas encodes REST schema fields as TableFieldSchema messages
// {name=1, type=2, mode=3, fields=4}, each as field num of the enclosing message.
func tableFieldSchemas(b []byte, num protowire.Number, fields []map[string]any) []byte {
	for _, f := range fields {
		name, _ := f["name"].(string)
		typ, _ := f["type"].(string)
		mode, _ := f["mode"].(string)
		if mode == "" {
			mode = "NULLABLE"
		}
		var m []byte
		m = appendString(m, 1, name)
		m = appendVarint(m, 2, storageTypes[strings.ToUpper(typ)])
		m = appendVarint(m, 3, storageModes[strings.ToUpper(mode)])
		if sub, ok := f["fields"].([]any); ok {
			var nested []map[string]any
			for _, n := range sub {
				if nm, ok := n.(map[string]any); ok {
					nested = append(nested, nm)
				}
			}
			m = tableFieldSchemas(m, 4, nested)
		}
		b = appendBytes(b, num, m)
	}
	return b
}

// getWriteStream answers GetWriteStreamRequest{name=1, view=3} on a table's default stream
// (every table exists) with WriteStream{name=1, type=2 (COMMITTED), table_schema=5, location=8},
// the schema being bigquery_schema, as the REST lookup's.
func getWriteStream(_ *server, cfg *config, req []byte) ([]byte, error) {
	name, err := stringField(req, 1)
	if err != nil || !strings.HasSuffix(name, "/streams/_default") {
		return nil, status.Error(codes.NotFound, "null backend: GetWriteStream serves default streams only")
	}
	var fields []map[string]any
	if err := json.Unmarshal(cfg.BigQuery, &fields); err != nil {
		return nil, status.Errorf(codes.Internal, "null backend: bigquery_schema: %v", err)
	}
	resp := appendVarint(appendString(nil, 1, name), 2, 1)
	resp = appendBytes(resp, 5, tableFieldSchemas(nil, 1, fields))
	return appendString(resp, 8, "US"), nil
}

// flushRows makes a BUFFERED stream's rows up to and including offset visible: they count.
func flushRows(s *server, _ *config, req []byte) ([]byte, error) {
	var name string
	var offset int64
	err := eachField(req, func(f field) bool {
		switch f.num {
		case 1:
			name = string(f.bytes)
		case 2:
			offset, _ = int64Wrapper(f.bytes)
		}
		return true
	})
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	st := s.streams.get(name)
	if st == nil {
		return nil, status.Errorf(codes.NotFound, "null backend: no stream %s", name)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	upTo := offset + 1
	if upTo > st.next {
		return nil, status.Errorf(codes.OutOfRange, "null backend: offset %d beyond the stream's %d rows", offset, st.next)
	}
	if upTo > st.flushed {
		s.counts.accepted("bigquery", st.table, upTo-st.flushed)
		st.flushed = upTo
	}
	return appendVarint(nil, 1, uint64(offset)), nil
}

func finalizeWriteStream(s *server, _ *config, req []byte) ([]byte, error) {
	name, err := stringField(req, 1)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	st := s.streams.get(name)
	if st == nil {
		return nil, status.Errorf(codes.NotFound, "null backend: no stream %s", name)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.finalized = true
	var resp []byte
	if st.next > 0 {
		resp = protowire.AppendTag(resp, 1, protowire.VarintType)
		resp = protowire.AppendVarint(resp, uint64(st.next))
	}
	return resp, nil
}
