package main

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"
)

// field is one top-level field of an encoded message: its number, and either its bytes
// (length-delimited fields) or its integer value (varints and fixed-width fields).
type field struct {
	num   protowire.Number
	typ   protowire.Type
	bytes []byte
	value uint64
}

var errMalformed = errors.New("malformed protobuf message")

// eachField calls fn for every top-level field of msg, in wire order, until fn returns false.
// Nested messages are not entered: a caller walks only the levels it needs.
func eachField(msg []byte, fn func(f field) bool) error {
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return errMalformed
		}
		msg = msg[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.BytesType:
			f.bytes, n = protowire.ConsumeBytes(msg)
		case protowire.VarintType:
			f.value, n = protowire.ConsumeVarint(msg)
		case protowire.Fixed32Type:
			var v uint32
			v, n = protowire.ConsumeFixed32(msg)
			f.value = uint64(v)
		case protowire.Fixed64Type:
			f.value, n = protowire.ConsumeFixed64(msg)
		default:
			n = protowire.ConsumeFieldValue(num, typ, msg)
		}
		if n < 0 {
			return errMalformed
		}
		msg = msg[n:]
		if !fn(f) {
			return nil
		}
	}
	return nil
}

// stringField returns the first length-delimited field number num of msg as a string.
func stringField(msg []byte, num protowire.Number) (string, error) {
	var out string
	err := eachField(msg, func(f field) bool {
		if f.num == num && f.typ == protowire.BytesType {
			out = string(f.bytes)
			return false
		}
		return true
	})
	return out, err
}

// bytesField returns the first length-delimited field number num of msg (nil if absent).
func bytesField(msg []byte, num protowire.Number) ([]byte, bool, error) {
	var out []byte
	found := false
	err := eachField(msg, func(f field) bool {
		if f.num == num && f.typ == protowire.BytesType {
			out, found = f.bytes, true
			return false
		}
		return true
	})
	return out, found, err
}

// int64Wrapper reads a google.protobuf.Int64Value (value = field 1).
func int64Wrapper(msg []byte) (int64, error) {
	var v int64
	err := eachField(msg, func(f field) bool {
		if f.num == 1 && f.typ == protowire.VarintType {
			v = int64(f.value)
		}
		return true
	})
	return v, err
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// appendStatus appends a google.rpc.Status (code = 1, message = 2) as field num.
func appendStatus(b []byte, num protowire.Number, code uint32, message string) []byte {
	var st []byte
	if code != 0 {
		st = appendVarint(st, 1, uint64(code))
	}
	if message != "" {
		st = appendString(st, 2, message)
	}
	return appendBytes(b, num, st)
}

// appendInt64Value appends a google.protobuf.Int64Value as field num.
func appendInt64Value(b []byte, num protowire.Number, v int64) []byte {
	var w []byte
	if v != 0 {
		w = appendVarint(w, 1, uint64(v))
	}
	return appendBytes(b, num, w)
}
