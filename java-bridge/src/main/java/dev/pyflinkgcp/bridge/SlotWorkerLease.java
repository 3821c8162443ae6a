package dev.pyflinkgcp.bridge;

import java.lang.reflect.Field;
import java.time.Duration;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Lock;

import org.apache.flink.runtime.memory.MemoryManager;
import org.apache.flink.runtime.memory.OpaqueMemoryResource;
import org.apache.flink.streaming.api.operators.python.process.AbstractExternalPythonFunctionOperator;
import org.apache.flink.streaming.runtime.tasks.StreamTask;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One more lease on the slot's shared Python worker, held by a sink operator so that the slot's
 * last release, which closes the worker, runs on a thread of ours.
 *
 * <p>Why: the Python operators of one slot share one Python worker through a leased resource of
 * the slot's memory manager; the operator that releases the last lease closes Beam's {@code
 * DefaultJobBundleFactory}. When that operator's task is being cancelled while one of its bundle
 * flushes still runs on PyFlink's flush thread, the factory's close and the flush both release
 * the same bundle reference, and Beam throws "Reference count must not be negative" from the
 * task's cleanup: the TaskManager treats an error there as fatal and shuts down. The sink's own
 * operators wait for their flush before closing ({@link RunningFlush}); PyFlink's own Python
 * operators (a {@code map} the writer is not fused with) do not, and the fault suite saw a
 * TaskManager end that way when a writer failed and the source task's Python map was cancelled.
 *
 * <p>What this does: after the operator's runner opened (so the resource exists and cannot go
 * away), the operator takes one more lease. When the operator closes, a daemon thread keeps that
 * lease until every other holder in the slot released theirs (or a bound passes), then releases
 * it within milliseconds: the worker is then closed on that thread, where Beam's error is
 * logged, not on a task's cleanup path. It does not wait for the cancelled operator's bundle to
 * end: a restarted attempt deployed into the same slot would otherwise join the old worker. Nothing changes while the job runs; a slot without a shared worker (thread mode,
 * or a job that gives the Python worker no managed memory) gets no lease.
 */
final class SlotWorkerLease {

    /** PyFlink's name of the shared Python worker's resource in the slot's memory manager. */
    static final String RESOURCE = "python-process-managed-memory";

    /** How long the lease waits for the slot's other holders after its operator closed. */
    static final Duration WAIT = Duration.ofSeconds(60);

    private static final long POLL_MS = 5;

    /**
     * The extra leases the sink's operators hold per slot (memory manager): a writer and a
     * committer in one slot each hold one, and neither may count the other's as a holder to wait
     * for, or both would wait until the bound while a restarted attempt joins the old worker.
     */
    private static final Map<MemoryManager, AtomicInteger> EXTRA = new ConcurrentHashMap<>();

    private static final Logger LOG = LoggerFactory.getLogger(SlotWorkerLease.class);

    private final MemoryManager memoryManager;
    private final OpaqueMemoryResource<AutoCloseable> lease;
    private final String name;

    private SlotWorkerLease(
            MemoryManager memoryManager, OpaqueMemoryResource<AutoCloseable> lease, String name) {
        this.memoryManager = memoryManager;
        this.lease = lease;
        this.name = name;
    }

    /**
     * Takes one more lease on the slot's shared Python worker, if there is one.
     *
     * @param memoryManager the slot's memory manager (the task's environment's)
     * @param name the operator's name, for the log
     * @return the lease, or null where the slot shares no Python worker or Flink's fields moved
     */
    static SlotWorkerLease take(MemoryManager memoryManager, String name) {
        if (memoryManager == null || holders(memoryManager) < 1) {
            return null;
        }
        try {
            // The resource exists and this operator's runner holds it, so the initializer (which
            // would allocate a new worker) is never called.
            OpaqueMemoryResource<AutoCloseable> lease =
                    memoryManager.getSharedMemoryResourceForManagedMemory(
                            RESOURCE,
                            size -> {
                                throw new IllegalStateException(
                                        "the slot's Python worker is gone; not allocating one");
                            },
                            1.0);
            EXTRA.computeIfAbsent(memoryManager, m -> new AtomicInteger()).incrementAndGet();
            return new SlotWorkerLease(memoryManager, lease, name);
        } catch (Exception | LinkageError e) {
            LOG.warn("{}: could not hold the slot's Python worker; closing as PyFlink does", name, e);
            return null;
        }
    }

    /**
     * Closes a sink operator: waits for its running flush and closes it ({@link RunningFlush}),
     * then releases its extra lease ({@link #release}).
     *
     * <p>Only a cancelled or failing task hands the last release to a thread of ours: a task that
     * ends normally closes the worker itself, so the Python functions' close() has run before the
     * job counts as finished.
     */
    static void close(
            AbstractExternalPythonFunctionOperator<?> operator,
            StreamTask<?, ?> task,
            String name,
            SlotWorkerLease lease,
            RunningFlush.Closer close)
            throws Exception {
        boolean ending = task.isCanceled() || task.isFailing();
        boolean flushEnded = false;
        try {
            flushEnded = RunningFlush.close(operator, name, close);
        } finally {
            release(lease, flushEnded && ending);
        }
    }

    /**
     * Releases the lease: once the slot's other holders released theirs, on a daemon thread (so
     * the operator's close does not wait), when its task is cancelled or failing and the
     * operator's own flush ended; at once, on the closing thread, otherwise (a task that ends
     * normally closes the worker as PyFlink does, so every Python function's close() has run
     * before the job counts as finished).
     *
     * <p>Why not always later: a flush that did not end usually waits on a Python worker that is
     * gone, and closing Beam's environment then can block for good. On the task's thread that
     * trips Flink's cancellation watchdog, which ends the TaskManager and so frees the slot; on
     * a thread of ours it would keep the slot's Python memory reserved, and every restarted
     * attempt in that slot would fail to get it.
     *
     * @param lease the lease from {@link #take}, or null
     * @param deferred whether to release later (a cancelled or failing task whose flush ended)
     */
    static void release(SlotWorkerLease lease, boolean deferred) throws Exception {
        if (lease == null) {
            return;
        }
        if (!deferred) {
            try {
                lease.closeLease();
            } catch (Exception e) {
                if (!RunningFlush.isNegativeReferenceCount(e)) {
                    throw e;
                }
                LOG.warn(
                        "{}: Beam released a Python bundle reference twice while the slot's"
                                + " Python worker closed",
                        lease.name,
                        e);
            }
            return;
        }
        Thread thread = new Thread(lease::releaseWhenAlone, "pyflink-gcp-slot-worker-lease");
        thread.setDaemon(true);
        thread.start();
    }

    private void releaseWhenAlone() {
        long deadline = System.nanoTime() + WAIT.toNanos();
        int others = others();
        while (others > 0 && System.nanoTime() < deadline) {
            try {
                TimeUnit.MILLISECONDS.sleep(POLL_MS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                break;
            }
            others = others();
        }
        if (others > 0) {
            LOG.info(
                    "{}: after {} s the slot's Python worker still has {} other holder(s);"
                            + " releasing this operator's extra lease",
                    name,
                    WAIT.getSeconds(),
                    others);
        }
        try {
            closeLease();
        } catch (Throwable e) {
            if (RunningFlush.isNegativeReferenceCount(e)) {
                LOG.warn(
                        "{}: Beam released a Python bundle reference twice while the slot's Python"
                                + " worker closed (a cancelled operator's flush was still"
                                + " running); the worker is closed",
                        name,
                        e);
            } else if (isShutDown(e)) {
                // The job ended and its slot was freed between two looks: the worker is closed
                // (the resource's close comes first), only handing its memory back failed.
                LOG.debug("{}: released the slot's Python worker after the slot was freed", name);
            } else {
                LOG.warn("{}: closing the slot's Python worker failed", name, e);
            }
        }
    }

    /** The slot's holders that are not the sink's extra leases: the operators still open. */
    private int others() {
        int all = holders(memoryManager);
        AtomicInteger extra = EXTRA.get(memoryManager);
        return all - (extra == null ? 0 : extra.get());
    }

    private void closeLease() throws Exception {
        AtomicInteger extra = EXTRA.get(memoryManager);
        if (extra != null && extra.decrementAndGet() <= 0) {
            EXTRA.remove(memoryManager, extra);
        }
        lease.close();
    }

    private static boolean isShutDown(Throwable error) {
        for (Throwable t = error; t != null; t = t.getCause()) {
            if (t instanceof IllegalStateException
                    && String.valueOf(t.getMessage()).contains("has been shut down")) {
                return true;
            }
        }
        return false;
    }

    // --- Flink's private fields, read, never written --------------------------------------------

    private static final Field SHARED_RESOURCES = field(MemoryManager.class, "sharedResources");
    private static final Field LOCK =
            field(className("org.apache.flink.runtime.memory.SharedResources"), "lock");
    private static final Field RESERVED =
            field(
                    className("org.apache.flink.runtime.memory.SharedResources"),
                    "reservedResources");
    private static final Field LEASE_HOLDERS =
            field(
                    className("org.apache.flink.runtime.memory.SharedResources$LeasedResource"),
                    "leaseHolders");

    /**
     * How many leases the slot's shared Python worker has: 0 where there is none, -1 where
     * Flink's fields could not be read.
     */
    static int holders(MemoryManager memoryManager) {
        if (SHARED_RESOURCES == null || LOCK == null || RESERVED == null || LEASE_HOLDERS == null) {
            return -1;
        }
        try {
            Object shared = SHARED_RESOURCES.get(memoryManager);
            Lock lock = (Lock) LOCK.get(shared);
            lock.lock();
            try {
                Object resource = ((Map<?, ?>) RESERVED.get(shared)).get(RESOURCE);
                return resource == null ? 0 : ((Set<?>) LEASE_HOLDERS.get(resource)).size();
            } finally {
                lock.unlock();
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            return -1;
        }
    }

    private static Class<?> className(String name) {
        try {
            return Class.forName(name, false, MemoryManager.class.getClassLoader());
        } catch (ClassNotFoundException e) {
            return null;
        }
    }

    private static Field field(Class<?> owner, String name) {
        if (owner == null) {
            return null;
        }
        try {
            Field field = owner.getDeclaredField(name);
            field.setAccessible(true);
            return field;
        } catch (ReflectiveOperationException | RuntimeException e) {
            LoggerFactory.getLogger(SlotWorkerLease.class)
                    .warn(
                            "Flink's {} has no field {}; the sink's operators will not hold the"
                                    + " slot's Python worker",
                            owner.getName(),
                            name);
            return null;
        }
    }
}
