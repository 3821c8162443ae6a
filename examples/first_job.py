"""A first job: orders to one Pub/Sub topic per region, then read back (the README's job)."""

import contextlib
import json
import sys
import warnings

from google.api_core.exceptions import AlreadyExists
from google.cloud import pubsub_v1
from pyflink.common import Configuration
from pyflink.datastream import StreamExecutionEnvironment

from pyflink_gcp.pubsub import PubSubSerializationSchema, PubSubSink, TopicDestination

PROJECT, REGIONS, ORDERS = "demo-project", ["eu", "us", "asia"], 3_000
warnings.filterwarnings("ignore", message="The return_immediately flag is deprecated")

# Pub/Sub keeps a message only for the subscriptions that exist when it is published.
publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
for region in REGIONS:
    topic = publisher.topic_path(PROJECT, f"orders-{region}")
    with contextlib.suppress(AlreadyExists):  # a second run reuses them
        publisher.create_topic(name=topic)
        subscriber.create_subscription(
            name=subscriber.subscription_path(PROJECT, f"orders-{region}"), topic=topic
        )

conf = Configuration()
conf.set_string("python.executable", sys.executable)  # the workers run this interpreter
env = StreamExecutionEnvironment.get_execution_environment(conf)
env.enable_checkpointing(1_000)
orders = env.from_collection(
    [{"id": i, "region": REGIONS[i % 3], "cents": i * 7 % 1_000} for i in range(ORDERS)]
)
orders.sink_to(
    PubSubSink.builder()
    .set_destination_resolver(lambda o, ctx: TopicDestination.of(PROJECT, f"orders-{o['region']}"))
    .set_serializer(PubSubSerializationSchema.payload(lambda o, ctx: json.dumps(o).encode()))
    .build()
)
env.execute("first job")

for region in REGIONS:
    request = {"subscription": subscriber.subscription_path(PROJECT, f"orders-{region}")}
    got = 0
    while batch := subscriber.pull(
        request={**request, "max_messages": 1_000, "return_immediately": True}, timeout=10
    ).received_messages:
        subscriber.acknowledge(request={**request, "ack_ids": [m.ack_id for m in batch]})
        got += len(batch)
    print(f"orders-{region}: {got} messages")
