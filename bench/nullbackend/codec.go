package main

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
)

// frame is one gRPC message as its encoded bytes. The server never builds the services'
// generated message types: requests are scanned with protowire for the few fields that name
// a destination or count its records, and responses are encoded by hand, so a request costs
// a copy and one walk of its top levels rather than a full decode.
type frame struct {
	b []byte
}

// rawCodec passes frames through untouched. It replaces the proto codec for every method of
// the server (grpc.ForceServerCodecV2), which is what lets one unknown-service handler serve
// all five services.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f, ok := v.(*frame)
	if !ok {
		return nil, fmt.Errorf("null backend codec: cannot marshal %T", v)
	}
	return mem.BufferSlice{mem.SliceBuffer(f.b)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	f, ok := v.(*frame)
	if !ok {
		return fmt.Errorf("null backend codec: cannot unmarshal into %T", v)
	}
	// A copy: gRPC reuses the buffers once Unmarshal returns.
	f.b = data.Materialize()
	return nil
}

var _ encoding.CodecV2 = rawCodec{}
