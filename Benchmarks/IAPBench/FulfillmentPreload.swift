import Foundation
import GRDB

/// The bulk path of the scale scenario: prepared statements in one transaction, straight into the
/// schema fulfillment created (so its constraints and triggers still apply).
enum FulfillmentPreload {
    static func run(path: String, accounts: Int, ledgerRows: Int) throws -> Int {
        var config = Configuration()
        config.busyMode = .timeout(60)
        let queue = try DatabaseQueue(path: path, configuration: config)
        let run = String(UUID().uuidString.prefix(8)).lowercased()
        let perAccount = ledgerRows / accounts
        var extra = ledgerRows - perAccount * accounts
        var inserted = 0
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        try queue.inTransaction(.immediate) { db in
            let processed = try db.makeStatement(
                sql: """
                    INSERT INTO processed_transaction (environment, transaction_id, original_transaction_id, account_id, scope, product_id, grant_kind,
                                                      coins_granted, purchase_date_ms, processed_at_ms)
                    VALUES ('Production', ?, ?, ?, 'Production', 'coins.1000', 'coins', 1000000, ?, ?)
                    """)
            let ownership = try db.makeStatement(
                sql: """
                    INSERT INTO ownership (environment, original_transaction_id, account_id, scope, product_id, bound_at_ms)
                    VALUES ('Production', ?, ?, 'Production', 'coins.1000', ?)
                    """)
            let ledger = try db.makeStatement(
                sql: """
                    INSERT INTO ledger (account_id, scope, delta, balance, kind, environment, transaction_id, idempotency_key, memo, created_at_ms)
                    VALUES (?, 'Production', ?, ?, ?, ?, ?, ?, NULL, ?)
                    """)
            let wallet = try db.makeStatement(sql: "INSERT INTO wallet (account_id, scope, balance) VALUES (?, 'Production', ?)")
            for a in 0..<accounts {
                let account = "preload-\(run)-\(a)"
                let transaction = "9\(run.hashValue & 0xffff)\(a)"
                try processed.execute(arguments: [transaction, transaction, account, now, now])
                try ownership.execute(arguments: [transaction, account, now])
                var balance: Int64 = 1_000_000
                try ledger.execute(arguments: [account, balance, balance, "grant", "Production", transaction, nil, now])
                inserted += 1
                var spends = perAccount - 1
                if extra > 0 { spends += 1; extra -= 1 }
                for s in 0..<spends {
                    balance -= 10
                    try ledger.execute(arguments: [account, -10, balance, "spend", nil, nil, "preload-\(s)", now])
                    inserted += 1
                }
                try wallet.execute(arguments: [account, balance])
            }
            return .commit
        }
        return inserted
    }
}
