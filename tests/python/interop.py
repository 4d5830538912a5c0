"""Real-client interop: the PyPI `rocketmq` package (C++ client core) sends N messages with keys
and tags (sync) through the name server, and its push consumer receives every one of them.

usage: interop.py NAMESRV_ADDR TOPIC GROUP COUNT TIMEOUT_S
Prints `SENT n`, `RECEIVED n` and exits 0 only when every message arrived.
"""
import sys
import threading
import time

from rocketmq.client import Message, Producer, PushConsumer


def main():
    namesrv, topic, group, count, timeout_s = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    producer = Producer(group + "_P")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    sent = set()
    for i in range(count):
        msg = Message(topic)
        msg.set_keys("key-%d" % i)
        msg.set_tags("Tag%d" % (i % 3))
        msg.set_body("interop-%d" % i)
        for attempt in range(20):
            try:
                r = producer.send_sync(msg)
                if int(r.status) == 0:
                    break
            except Exception as e:  # route not ready yet / transient
                if attempt == 19:
                    raise
                time.sleep(0.5)
        sent.add("interop-%d" % i)
    producer.shutdown()
    print("SENT %d" % len(sent), flush=True)

    got = set()
    lock = threading.Lock()
    done = threading.Event()

    def on_message(m):
        body = m.body.decode() if isinstance(m.body, bytes) else m.body
        with lock:
            got.add(body)
            if sent <= got:
                done.set()
        return None

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.subscribe(topic, on_message, "*")
    consumer.start()
    done.wait(timeout_s)
    consumer.shutdown()
    with lock:
        missing = sent - got
        print("RECEIVED %d" % len(got & sent), flush=True)
        if missing:
            print("MISSING %d e.g. %s" % (len(missing), sorted(missing)[:5]), flush=True)
            sys.exit(1)


if __name__ == "__main__":
    main()
