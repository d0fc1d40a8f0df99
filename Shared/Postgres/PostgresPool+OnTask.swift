import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO

extension PostgresPool {
    /// `write(locking: keys, optimistically: true, firstAlone: true)` whose first attempt runs on the caller's task, not
    /// on a pool thread: the body runs there, its one read and its one write are sent and awaited there, and no thread
    /// waits for the server. Why: a pool thread waiting per statement costs a wake-up per answer, and two processes
    /// doing so on the same cores lost 12% of their statements against one (postgres-nio's own async client lost none;
    /// Benchmarks/README.md, "A thread waiting per statement").
    ///
    /// The same attempt as a pool thread's first, in the same order: the body runs until its read, which the caller sends;
    /// then again with the answer (a body is a function of what it reads), until its write, which the caller sends.
    /// Whatever the attempt cannot do from a task goes to a pool thread before anything was sent (`OnTask.NeedsThread`: a
    /// read not yet prepared on the connection, a write function not yet created, an unnamed read, a second write); a
    /// body that needs a transaction runs in one there from the start (as after its read alone on a thread); an attempt
    /// that failed in a way another may not goes on there as the second (with the lock, in a transaction). Only idle
    /// connections are taken, and at most `size` attempts at once run on tasks, so a pool has at most twice `size`
    /// connections.
    public func writeFirstOnTask<T: Sendable>(
        locking keys: [String], _ body: @escaping @Sendable (PostgresSession) throws -> T
    ) async throws -> T {
        let begin = "BEGIN ISOLATION LEVEL REPEATABLE READ"
        if let pooled = takeForTask() {
            let outcome: OnTaskOutcome<T>
            do {
                outcome = try await attemptOnTask(pooled, yieldingTo: Set(keys).sorted(), body)
                roundTripCount.onTask.withLockedValue { $0.inFlight -= 1 }  // before a pool thread's attempt, if any
            } catch {
                roundTripCount.onTask.withLockedValue { $0.inFlight -= 1 }
                throw error
            }
            switch outcome {
            case .done(let value): return value
            case .nothingSent: break
            case .needsTransaction:
                return try await run(begin: begin, locking: keys, yieldingTo: keys, optimistically: true, body)
            case .failed:
                return try await run(
                    begin: begin, locking: keys, yieldingTo: keys, optimistically: true, firstAlone: true, afterAFailure: true, body)
            }
        }
        return try await run(begin: begin, locking: keys, yieldingTo: keys, optimistically: true, firstAlone: true, body)
    }

    /// First attempts that ran on their caller's task (tests, benchmarks).
    public var attemptsOnTask: Int { roundTripCount.onTask.withLockedValue { $0.total } }

    private enum OnTaskOutcome<T> {
        case done(T)
        /// Nothing was sent that writes: the first attempt runs on a pool thread.
        case nothingSent
        /// The body needs a transaction (`PostgresSession.NeedsTransaction`), nothing written: the first attempt runs in one.
        case needsTransaction
        /// It failed in a way another attempt may not (a conflict, a lost connection before writing): the second runs.
        case failed
    }

    private func takeForTask() -> PooledConnection? {
        let admitted = roundTripCount.onTask.withLockedValue { onTask in
            guard onTask.inFlight < size else { return false }
            onTask.inFlight += 1
            return true
        }
        guard admitted else { return nil }
        if let pooled = idleConnection() { return pooled }
        roundTripCount.onTask.withLockedValue { $0.inFlight -= 1 }
        return nil
    }

    private func attemptOnTask<T: Sendable>(
        _ pooled: PooledConnection, yieldingTo yields: [String], _ body: (PostgresSession) throws -> T
    ) async throws -> OnTaskOutcome<T> {
        let onTask = PostgresSession.OnTask()
        let session = PostgresSession(
            connection: pooled.connection, logger: logger, roundTrips: roundTripCount, prepared: pooled.prepared,
            alone: PostgresSession.Alone(), yieldingTo: yields, onTask: onTask)
        var writing = false
        do {
            var value: T
            while true {
                onTask.startRun()
                do {
                    value = try body(session)
                    // A body that went on past a read it did not get (or anything else a thread must do) decided on nothing.
                    guard !onTask.asked else { throw PostgresSession.OnTask.NeedsThread() }
                    break
                } catch let error where onTask.asked && !(error is PostgresSession.OnTask.NeedsRead) {
                    throw PostgresSession.OnTask.NeedsThread()  // whatever it threw, it decided on nothing
                } catch is PostgresSession.OnTask.NeedsRead {
                    guard let read = onTask.read, onTask.answer == nil else { throw PostgresSession.OnTask.NeedsThread() }
                    roundTripCount.one()
                    let rows: [PostgresRow]
                    do {
                        rows = try await answer(pooled.connection, read.statement.execute(read.values))
                    } catch {
                        let failed = PreparedReadFailed.reading(error, executing: true)
                        if (failed as? PreparedReadFailed)?.staleStatement == true { pooled.prepared.forget(read.sql) }
                        throw failed
                    }
                    onTask.answer = PostgresSession.relabelled(rows)
                }
            }
            roundTripCount.onTask.withLockedValue { $0.total += 1 }
            guard let write = onTask.write else {
                checkin(pooled)
                return .done(value)
            }
            writing = true
            roundTripCount.one()
            do {
                _ = try await answer(pooled.connection, pooled.connection.query(write, logger: logger))
            } catch let error as PSQLError where write.sql.hasPrefix("SELECT \(WriteFunctions.prefix)") && WriteFunctions.isMissing(error) {
                // The statement failed whole, so nothing of it was written: run again, the generic way (as on a thread).
                logger.warning("a write function is missing; using run_writes", metadata: ["error": "\(Self.describe(error))"])
                pooled.prepared.functions.withLockedValue { $0 = nil }
                checkin(pooled)
                roundTripCount.retried()
                return .failed
            }
            checkin(pooled)
            return .done(value)
        } catch is PostgresSession.OnTask.NeedsThread {
            checkin(pooled)
            return .nothingSent
        } catch is PostgresSession.NeedsTransaction {
            checkin(pooled)
            return onTask.asked ? .nothingSent : .needsTransaction
        } catch let error where Self.failure(error) != nil {
            let failure = Self.failure(error)!
            if failure.connectionLost { discard(pooled.connection) } else { checkin(pooled) }
            if failure.connectionLost && writing { throw outcomeUnknown() }
            guard failure.connectionLost || failure.transient else {
                logger.error("database statement failed", metadata: ["error": "\(Self.describe(error))"])
                throw error
            }
            roundTripCount.retried()
            try? await Task.sleep(nanoseconds: UInt64(Self.pauseMicros(after: 1)) * 1_000)
            return .failed
        } catch {
            checkin(pooled)  // the body's own error (a rule refusing): nothing was sent that writes
            throw error
        }
    }

    /// Awaits `future` at most `PostgresSession.deadline`; past it the connection is closed and the wait fails.
    private func answer<V: Sendable>(_ connection: PostgresConnection, _ future: EventLoopFuture<V>) async throws -> V {
        try await PostgresSession.bounded(future, deadline: PostgresSession.deadline) {
            let closing: EventLoopFuture<Void> = connection.close()
            _ = closing
        }
    }
}

extension PostgresSession {
    /// An attempt on its caller's task (`PostgresPool.writeFirstOnTask`): the read it asked for and its answer, and the
    /// write it held for the caller to send.
    final class OnTask {
        struct Read {
            let sql: String
            let statement: PreparedQuery
            let values: [PostgresData]
        }
        var read: Read?
        var answer: [[PostgresCell]]?
        var write: PostgresQuery?
        /// Set when this run of the body was refused something (`needsRead`, `needsThread`), even if it caught the error.
        var asked = false
        /// Whether this run of the body got the answer already: a read gets it once.
        var answered = false

        /// Before each run of the body: what a run before it held or was refused does not carry over; the read and its
        /// answer do.
        func startRun() {
            write = nil
            asked = false
            answered = false
        }

        /// The answer to the read the caller sent, for the same statement with the same values, once per run; nil: this
        /// read is the one to send (none asked yet).
        func answer(_ sql: String, _ values: [PostgresData]) throws -> [[PostgresCell]]? {
            guard let read else { return nil }
            guard let answer, !answered, read.sql == sql, read.values.count == values.count,
                zip(read.values, values).allSatisfy({ $0.type == $1.type && $0.value == $1.value })
            else { throw needsThread() }
            answered = true
            return answer
        }

        func needsRead(_ read: Read) -> NeedsRead {
            self.read = read
            asked = true
            return NeedsRead()
        }

        func needsThread() -> NeedsThread {
            asked = true
            return NeedsThread()
        }

        /// The body asked for its read: the caller sends it, then runs the body again with the answer.
        struct NeedsRead: Error {}
        /// Something only a pool thread does (prepare a read, create a write function) or a second write: nothing sent.
        struct NeedsThread: Error {}
    }
}
