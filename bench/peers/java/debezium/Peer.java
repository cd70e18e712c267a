// Peer runs Debezium's embedded engine (PostgreSQL connector, pgoutput, the
// outbox EventRouter) paired with a KafkaProducer the way Debezium Server's
// Kafka sink pairs them: each batch's records are sent, each send's future
// is waited for, and only then is the record marked processed. Once it has
// sent the given number of records it prints one JSON line of results on
// stdout, and stops when its stdin closes: the benchmark reads its CPU
// time until then.
//
// Options: --records N and the engine's properties as --P name=value pairs
// (bench/peers passes the connection, slot, publication, routing and the
// tuned settings); --X name=value pairs are the producer's.
import io.debezium.embedded.Connect;
import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.source.SourceRecord;

public final class Peer {
    public static void main(String[] argv) throws Exception {
        long records = 0, timeoutS = 600;
        Properties engine = new Properties(), producer = new Properties();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            String v = argv[i + 1];
            switch (argv[i]) {
                case "--records" -> records = Long.parseLong(v);
                case "--timeout-s" -> timeoutS = Long.parseLong(v);
                case "--P" -> put(engine, v);
                case "--X" -> put(producer, v);
                default -> throw new IllegalArgumentException("unknown option " + argv[i]);
            }
        }
        producer.putIfAbsent(ProducerConfig.ACKS_CONFIG, "all");
        producer.putIfAbsent(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        KafkaProducer<byte[], byte[]> kp = new KafkaProducer<>(producer, new ByteArraySerializer(), new ByteArraySerializer());

        final long want = records;
        AtomicLong sent = new AtomicLong(), first = new AtomicLong(), last = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        CountDownLatch finished = new CountDownLatch(1);
        DebeziumEngine.ChangeConsumer<RecordChangeEvent<SourceRecord>> sink = (batch, committer) -> {
            List<Future<RecordMetadata>> futures = new ArrayList<>(batch.size());
            for (RecordChangeEvent<SourceRecord> e : batch) {
                SourceRecord r = e.record();
                RecordHeaders headers = new RecordHeaders();
                for (Header h : r.headers()) {
                    headers.add(h.key(), bytes(h.value()));
                }
                futures.add(kp.send(new ProducerRecord<>(r.topic(), null, bytes(r.key()), bytes(r.value()), headers)));
            }
            for (int i = 0; i < batch.size(); i++) {
                try {
                    futures.get(i).get();
                } catch (Exception ex) {
                    failure.compareAndSet(null, ex);
                    finished.countDown();
                    throw new InterruptedException("send failed: " + ex);
                }
                committer.markProcessed(batch.get(i));
                long now = nowNanos();
                long n = sent.incrementAndGet();
                if (n == 1) {
                    first.set(now);
                }
                if (n == want) {
                    last.set(now);
                    finished.countDown();
                }
            }
            committer.markBatchFinished();
        };
        DebeziumEngine<RecordChangeEvent<SourceRecord>> dbz = DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
                .using(engine)
                .notifying(sink)
                .using((success, message, error) -> {
                    if (!success) {
                        failure.compareAndSet(null, error != null ? error : new IllegalStateException(message));
                        finished.countDown();
                    }
                })
                .build();
        ExecutorService run = Executors.newSingleThreadExecutor();
        run.execute(dbz);
        boolean done = finished.await(timeoutS, TimeUnit.SECONDS);
        if (failure.get() != null) {
            System.err.println("debezium peer: " + failure.get());
            failure.get().printStackTrace();
            System.exit(1);
        }
        if (!done) {
            System.err.println("debezium peer: sent " + sent.get() + " of " + records + " records before the timeout");
            System.exit(1);
        }
        System.out.println("{\"peer\":\"debezium\",\"version\":\"" + Connect.class.getPackage().getImplementationVersion()
                + "\",\"client\":\"kafka-clients " + org.apache.kafka.common.utils.AppInfoParser.getVersion()
                + "\",\"records\":" + records + ",\"handled\":" + sent.get()
                + ",\"first_ns\":" + first.get() + ",\"last_ns\":" + last.get() + "}");
        System.out.flush();
        while (System.in.read() >= 0) {
            // wait for the benchmark to close stdin
        }
        dbz.close();
        kp.close();
        run.shutdown();
        System.exit(0);
    }

    static void put(Properties p, String kv) {
        int eq = kv.indexOf('=');
        if (eq < 0) {
            throw new IllegalArgumentException("want name=value, got " + kv);
        }
        p.put(kv.substring(0, eq), kv.substring(eq + 1));
    }

    static byte[] bytes(Object o) {
        if (o == null) {
            return null;
        }
        if (o instanceof byte[] b) {
            return b;
        }
        return o.toString().getBytes(StandardCharsets.UTF_8);
    }

    static long nowNanos() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1_000_000_000L + t.getNano();
    }
}
