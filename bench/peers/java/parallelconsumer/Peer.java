// Peer runs Confluent Parallel Consumer over a pre-filled topic (or a live
// one) for bench/peers and prints one JSON line of results on stdout.
//
// Every record's value is 16 bytes, big-endian: the record's sequence number
// within its key (0, 1, 2, ...), then the Unix nanoseconds it was meant to be
// sent at (0 for a backlog). The handler sleeps the given milliseconds, checks
// the per-key order when asked (a sequence number not one past the key's last
// one is a violation), and notes when it finished the record. The peer stops
// once it has handled the given number of records.
import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.CommitMode;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import java.nio.ByteBuffer;
import java.time.Instant;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class Peer {
    public static void main(String[] argv) throws Exception {
        Map<String, String> a = args(argv);
        String brokers = a.get("brokers"), topic = a.get("topic"), group = a.get("group");
        int records = Integer.parseInt(a.get("records"));
        long sleepMs = Long.parseLong(a.getOrDefault("sleep-ms", "0"));
        ProcessingOrder order = ProcessingOrder.valueOf(a.getOrDefault("ordering", "KEY"));
        int concurrency = Integer.parseInt(a.getOrDefault("concurrency", "16"));
        boolean checkOrder = order == ProcessingOrder.KEY && Boolean.parseBoolean(a.getOrDefault("check-order", "true"));
        boolean live = Boolean.parseBoolean(a.getOrDefault("live", "false"));

        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, brokers);
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        // The Parallel Consumer commits itself and refuses a consumer that
        // auto-commits.
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        ParallelConsumerOptions<byte[], byte[]> opts = ParallelConsumerOptions.<byte[], byte[]>builder()
                .consumer(consumer)
                .ordering(order)
                .maxConcurrency(concurrency)
                .commitMode(CommitMode.PERIODIC_CONSUMER_ASYNCHRONOUS)
                .build();
        ParallelStreamProcessor<byte[], byte[]> pc = ParallelStreamProcessor.createEosStreamProcessor(opts);

        AtomicLong done = new AtomicLong(), recorded = new AtomicLong(), violations = new AtomicLong(), first = new AtomicLong(), last = new AtomicLong();
        long[] lateNanos = live ? new long[records] : null;
        Map<String, Long> lastSeq = new ConcurrentHashMap<>();
        CountDownLatch finished = new CountDownLatch(1);
        pc.subscribe(List.of(topic));
        pc.poll(ctx -> {
            for (ConsumerRecord<byte[], byte[]> r : ctx.getConsumerRecordsFlattened()) {
                if (sleepMs > 0) {
                    try {
                        Thread.sleep(sleepMs);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new RuntimeException(e);
                    }
                }
                ByteBuffer v = ByteBuffer.wrap(r.value());
                long seq = v.getLong(), intended = v.getLong();
                if (checkOrder) {
                    // One key runs one record at a time in KEY order, so this
                    // read-then-write is the key's alone.
                    String key = new String(r.key());
                    Long prev = lastSeq.put(key, seq);
                    if (seq != (prev == null ? 0 : prev + 1)) {
                        violations.incrementAndGet();
                    }
                }
                long now = nowNanos();
                long n = done.incrementAndGet();
                if (n == 1) {
                    first.set(now);
                }
                if (live && n <= records) {
                    lateNanos[(int) n - 1] = now - intended;
                }
                // Finished once every record's lateness is written, not when
                // the last record is counted: a record counted earlier may
                // still be writing its own.
                if (recorded.incrementAndGet() == records) {
                    last.set(now);
                    finished.countDown();
                }
            }
        });
        if (!finished.await(Long.parseLong(a.getOrDefault("timeout-s", "600")), TimeUnit.SECONDS)) {
            System.err.println("parallel-consumer peer: handled " + done.get() + " of " + records + " records before the timeout");
            System.exit(1);
        }
        StringBuilder out = new StringBuilder();
        out.append("{\"peer\":\"confluent-parallel-consumer\",\"version\":\"0.5.3.3\"");
        out.append(",\"client\":\"kafka-clients ").append(org.apache.kafka.common.utils.AppInfoParser.getVersion()).append('"');
        out.append(",\"ordering\":\"").append(order).append("\",\"concurrency\":").append(concurrency);
        out.append(",\"records\":").append(records).append(",\"handled\":").append(done.get());
        out.append(",\"first_ns\":").append(first.get()).append(",\"last_ns\":").append(last.get());
        out.append(",\"violations\":").append(violations.get());
        if (live) {
            Arrays.sort(lateNanos);
            out.append(",\"p50_ns\":").append(lateNanos[(int) (records * 0.50)]);
            out.append(",\"p99_ns\":").append(lateNanos[Math.min(records - 1, (int) (records * 0.99))]);
        }
        out.append('}');
        System.out.println(out);
        System.out.flush();
        pc.closeDrainFirst();
        System.exit(0);
    }

    // nowNanos is the wall clock in Unix nanoseconds (microsecond resolution
    // on Linux), comparable with the Go side's time.Now().UnixNano().
    static long nowNanos() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1_000_000_000L + t.getNano();
    }

    // args reads --name value pairs.
    static Map<String, String> args(String[] argv) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) {
                throw new IllegalArgumentException("want --name value, got " + argv[i]);
            }
            m.put(argv[i].substring(2), argv[i + 1]);
        }
        return m;
    }
}
