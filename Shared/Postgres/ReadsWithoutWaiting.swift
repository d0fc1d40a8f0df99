import NIOCore
import PostgresNIO

extension PostgresPool {
    /// One read (a single statement, outside any transaction) sent from the calling thread, typically an event loop, on
    /// an idle connection, prepared by name as `PostgresSession.queryPrepared` does; its rows arrive on a future, with no
    /// thread waiting for them. Nil when no connection is idle or `size` such reads are already under way: the caller
    /// reads where it may wait (`withSessionHere`, which opens a connection when none is idle). A failure is not run
    /// again here (the caller reads where it may wait, under the pool's retry rules); its connection is kept or given up
    /// by the same rules as a waiting read's.
    ///
    /// Why: a read that waits holds a thread for its round trip. Accounts answered every authenticated request so,
    /// one round trip after another on its one blocking thread.
    public func readWithoutWaiting(_ sql: String, _ values: [PostgresData]) -> EventLoopFuture<[[PostgresCell]]>? {
        let size = self.size
        let taken: PooledConnection? = readsUnderway.withLockedValue { underway in
            guard underway < size else { return nil }
            // The most recently used open connection (a closed one, lost meanwhile, is dropped).
            guard let pooled = idle.withLockedValue({ list in list?.popLast(where: { !$0.connection.isClosed }) }) else { return nil }
            underway += 1
            return pooled
        }
        guard let pooled = taken else { return nil }
        let connection = pooled.connection
        let loop = connection.eventLoop
        let counts = roundTripCount
        let rows: EventLoopFuture<[PostgresRow]>
        if let statement = pooled.prepared[sql] {
            rows = statement.execute(values)
        } else if pooled.prepared.isFull {
            var binds = PostgresBindings(capacity: values.count)
            for value in values { binds.append(value) }
            rows = connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger).map { Array($0.rows) }
        } else {
            counts.prepared()
            let prepared = pooled.prepared
            rows = connection.prepare(query: sql).flatMap { statement in
                prepared.keep(statement, for: sql)
                return statement.execute(values)
            }
        }
        counts.one()
        // A server that stops answering: the connection is closed, which fails the read.
        let timer = loop.scheduleTask(in: PostgresSession.deadline) {
            let closing: EventLoopFuture<Void> = connection.close()
            _ = closing
        }
        return rows.always { result in
            timer.cancel()
            self.readsUnderway.withLockedValue { $0 -= 1 }
            switch result {
            case .success:
                counts.withoutWaitingCount.withLockedValue { $0 += 1 }
                counts.withoutWaitingCounter.increment()
                self.checkin(pooled)
            case .failure(let error):
                // As the waiting reads do: a connection lost (or closed by the deadline) is given up; a statement the
                // schema outgrew is forgotten; after any other refusal the connection is still good.
                let failed = error is PSQLError ? error : PreparedReadFailed(error, executing: true)
                self.logger.debug("a read without waiting failed; read again where it may wait", metadata: ["error": "\(Self.describe(failed))"])
                guard let failure = Self.failure(failed), !failure.connectionLost, !connection.isClosed else {
                    self.discard(connection)
                    return
                }
                if (failed as? PreparedReadFailed)?.staleStatement == true { pooled.prepared.forget(sql) }
                self.checkin(pooled)
            }
        }.map { rows in
            // postgres-nio 1.33 asks for binary results (Bind) but labels them with the Describe's text formats.
            rows.map { row in
                row.map { cell in
                    var cell = cell
                    cell.format = .binary
                    return cell
                }
            }
        }
    }
}

extension Array where Element == PooledConnection {
    /// Removes and answers the last element that `isUsable`, dropping the ones after it that are not.
    fileprivate mutating func popLast(where isUsable: (PooledConnection) -> Bool) -> PooledConnection? {
        while let last = popLast() {
            if isUsable(last) { return last }
        }
        return nil
    }
}
