import GRDB
import NIOConcurrencyHelpers

/// Group commit: write operations that arrive while the writer is busy are run together in ONE SQLite
/// transaction, each inside its own savepoint, and answered only after that transaction commits.
///
/// With `synchronous=FULL` every commit costs a WAL fsync plus BEGIN/COMMIT and a hop onto the writer
/// queue; sharing one commit among the operations that queued up meanwhile keeps each operation
/// exactly as durable (nobody hears "done" before the fsync) while the per-commit cost is paid once per
/// batch. An operation that throws rolls back its own savepoint only; if the commit itself fails, every
/// operation of the batch fails and none of them is applied.
final class GroupCommit: Sendable {
    private struct Job: Sendable {
        /// Runs the operation inside its savepoint and keeps its outcome.
        let run: @Sendable (Database) -> Void
        /// Answers the caller: after the commit (nil) or with the commit's error.
        let finish: @Sendable ((any Error)?) -> Void
    }

    private struct State {
        var jobs: [Job] = []
        var draining = false
    }

    private let writer: any DatabaseWriter
    private let state = NIOLockedValueBox(State())
    /// The most operations one transaction carries (bounds the latency a batch adds).
    let maxBatch: Int

    init(writer: any DatabaseWriter, maxBatch: Int = 256) {
        self.writer = writer
        self.maxBatch = maxBatch
    }

    func write<T: Sendable>(_ operation: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
            let outcome = NIOLockedValueBox<Result<T, any Error>?>(nil)
            let job = Job(
                run: { db in
                    do {
                        var value: T?
                        try db.inSavepoint {
                            value = try operation(db)
                            return .commit
                        }
                        outcome.withLockedValue { $0 = .success(value!) }
                    } catch {
                        outcome.withLockedValue { $0 = .failure(error) }
                    }
                },
                finish: { commitError in
                    if let commitError {
                        continuation.resume(throwing: commitError)
                    } else {
                        continuation.resume(with: outcome.withLockedValue { $0 }!)
                    }
                })
            let startDraining = state.withLockedValue { s -> Bool in
                s.jobs.append(job)
                guard !s.draining else { return false }
                s.draining = true
                return true
            }
            if startDraining {
                writer.asyncWriteWithoutTransaction { db in self.drain(db) }
            }
        }
    }

    /// On the writer queue: commits batches until nothing is waiting.
    private func drain(_ db: Database) {
        while true {
            let batch = state.withLockedValue { s -> [Job] in
                let n = min(s.jobs.count, maxBatch)
                let batch = Array(s.jobs.prefix(n))
                s.jobs.removeFirst(n)
                if batch.isEmpty { s.draining = false }
                return batch
            }
            if batch.isEmpty { return }
            var commitError: (any Error)?
            do {
                try db.inTransaction(.immediate) {
                    for job in batch { job.run(db) }
                    return .commit
                }
            } catch {
                commitError = error
            }
            for job in batch { job.finish(commitError) }
        }
    }
}
