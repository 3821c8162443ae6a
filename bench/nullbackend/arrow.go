package main

import (
	"encoding/binary"
	"errors"
)

// arrowRows returns the row count of an Arrow IPC RecordBatch message (what the sink puts in
// ArrowRecordBatch.serialized_record_batch) from its flatbuffer header alone: the batch body
// is never read.
//
// The message is [0xFFFFFFFF][int32 metadata size][flatbuffer Message][body] (the
// continuation marker may be missing in the legacy format). Message's fields: version 0,
// header_type 1 (3 = RecordBatch), header 2, bodyLength 3; RecordBatch's field 0 is its
// length (rows).
func arrowRows(b []byte) (rows int64, err error) {
	defer func() { // a truncated or foreign buffer: an error, never a crash
		if recover() != nil {
			rows, err = 0, errArrow
		}
	}()
	le := binary.LittleEndian
	if len(b) >= 4 && le.Uint32(b) == 0xFFFFFFFF {
		b = b[4:]
	}
	size := int(int32(le.Uint32(b)))
	meta := b[4 : 4+size]
	message := int(le.Uint32(meta))
	typePos := fbField(meta, message, 1)
	if typePos == 0 || meta[typePos] != 3 {
		return 0, errArrow
	}
	headerPos := fbField(meta, message, 2)
	if headerPos == 0 {
		return 0, errArrow
	}
	batch := headerPos + int(le.Uint32(meta[headerPos:]))
	lengthPos := fbField(meta, batch, 0)
	if lengthPos == 0 {
		return 0, nil // a default (absent) length is 0 rows
	}
	return int64(le.Uint64(meta[lengthPos:])), nil
}

var errArrow = errors.New("not an Arrow IPC RecordBatch message")

// fbField is the position of field index of the flatbuffer table at pos, 0 when absent.
func fbField(buf []byte, pos, index int) int {
	le := binary.LittleEndian
	vtable := pos - int(int32(le.Uint32(buf[pos:])))
	vsize := int(le.Uint16(buf[vtable:]))
	slot := 4 + 2*index
	if slot+2 > vsize {
		return 0
	}
	off := int(le.Uint16(buf[vtable+slot:]))
	if off == 0 {
		return 0
	}
	return pos + off
}
