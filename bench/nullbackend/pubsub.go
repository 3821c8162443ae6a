package main

import (
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// Pub/Sub (google.pubsub.v1.Publisher): Publish, and the topic lookup and creation the sink
// makes before a topic's first message. Every topic exists.
//
// Field numbers: PublishRequest{topic=1, messages=2}, PubsubMessage{data=1, ...},
// PublishResponse{message_ids=1}, GetTopicRequest{topic=1}, Topic{name=1, ...}.
const pubsubService = "/google.pubsub.v1.Publisher/"

func registerPubSub(h map[string]handler) {
	h[pubsubService+"Publish"] = unary(pubsubService+"Publish", publish)
	h[pubsubService+"GetTopic"] = unary(pubsubService+"GetTopic", getTopic)
	// CreateTopic takes a Topic and answers it.
	h[pubsubService+"CreateTopic"] = unary(pubsubService+"CreateTopic",
		func(_ *server, _ *config, req []byte) ([]byte, error) { return req, nil })
}

// publish counts the request's messages for its topic and answers one id per message; a
// request holding a message with the reject marker is refused whole with INVALID_ARGUMENT,
// as Pub/Sub refuses a request with an invalid message.
func publish(s *server, cfg *config, req []byte) ([]byte, error) {
	var topic string
	var messages int64
	marked := false
	err := eachField(req, func(f field) bool {
		switch f.num {
		case 1:
			topic = string(f.bytes)
		case 2:
			messages++
			if cfg.marked(f.bytes) {
				marked = true
			}
		}
		return true
	})
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if marked {
		s.counts.refusedRecords("pubsub", topic, messages)
		return nil, status.Errorf(codes.InvalidArgument,
			"null backend: a message of this request contains the reject marker")
	}
	first := s.ids.Add(messages) - messages
	resp := make([]byte, 0, messages*10)
	var id []byte
	for i := int64(0); i < messages; i++ {
		id = strconv.AppendInt(id[:0], first+i, 36)
		resp = protowire.AppendTag(resp, 1, protowire.BytesType)
		resp = protowire.AppendBytes(resp, id)
	}
	s.counts.accepted("pubsub", topic, messages)
	return resp, nil
}

func getTopic(_ *server, _ *config, req []byte) ([]byte, error) {
	name, err := stringField(req, 1)
	if err != nil || name == "" {
		return nil, status.Error(codes.InvalidArgument, "null backend: GetTopic without a topic")
	}
	return appendString(nil, 1, name), nil
}
