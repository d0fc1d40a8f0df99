import IAPProtocol

/// The support console's overview, both engines: per UTC day of a window, Production purchases (by purchase date),
/// grants (by processing), refunds (by revocation) and revenue per currency; and what waits now.
struct OverviewRecords {
    let s: any SQLSession
    static let dayMs: Int64 = 86_400_000

    init(_ session: any SQLSession) { self.s = session }

    /// `days` days ending with the one holding `nowMs`.
    func overview(days: Int, nowMs: Int64) throws -> FulfillmentGetOverview.Result {
        let today = nowMs - nowMs % Self.dayMs
        let start = today - Int64(days - 1) * Self.dayMs, end = today + Self.dayMs
        var out = (0..<days).map {
            OverviewDay(dayStartMs: start + Int64($0) * Self.dayMs, purchases: 0, grants: 0, refunds: 0, revenue: [], unpriced: 0)
        }
        for row in try s.rows(
            """
            SELECT (purchase_date_ms - ?1) / 86400000 AS day, currency, COUNT(*) AS n, CAST(SUM(price) AS BIGINT) AS amount
            FROM processed_transaction WHERE environment = 'Production' AND purchase_date_ms >= ?1 AND purchase_date_ms < ?2
            GROUP BY 1, 2 ORDER BY 1, 2
            """, start, end)
        {
            let day = Int(try row.get("day") as Int64), n: Int64 = try row.get("n")
            out[day].purchases += n
            if let currency: String = try row.get("currency"), let amount: Int64 = try row.get("amount") {
                out[day].revenue.append(CurrencyAmount(currency: currency, milliunits: amount))
            } else {
                out[day].unpriced += n
            }
        }
        for (column, filter, path) in [
            ("processed_at_ms", "", \OverviewDay.grants), ("revoked_at_ms", "AND revoke_reason = 'refunded'", \OverviewDay.refunds),
        ] {
            for row in try s.rows(
                """
                SELECT (\(column) - ?1) / 86400000 AS day, COUNT(*) AS n FROM processed_transaction
                WHERE environment = 'Production' AND \(column) >= ?1 AND \(column) < ?2 \(filter)
                GROUP BY 1
                """, start, end)
            {
                out[Int(try row.get("day") as Int64)][keyPath: path] = try row.get("n")
            }
        }
        let active: Int64 =
            try s.value(
                """
                SELECT COUNT(*) FROM entitlement e WHERE e.scope = 'Production' AND e.revoked_at_ms IS NULL AND e.expires_at_ms > ?1
                AND EXISTS (SELECT 1 FROM processed_transaction p WHERE p.environment = e.environment
                            AND p.original_transaction_id = e.original_transaction_id AND p.grant_kind = 'subscription')
                """, nowMs) ?? 0
        let parked: Int64 = try s.value("SELECT COUNT(*) FROM notification_inbox WHERE state = 'parked'") ?? 0
        let waiting: Int64 = try s.value("SELECT COUNT(*) FROM outbox WHERE kind != 'webhook'") ?? 0
        return .init(days: out, activeSubscriptions: active, parkedNotifications: parked, waitingAtStores: waiting)
    }
}
