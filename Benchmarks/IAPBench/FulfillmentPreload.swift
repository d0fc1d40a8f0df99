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
                    INSERT INTO processedTransaction (environment, transactionId, originalTransactionId, accountId, scope, productId, grantKind,
                                                      coinsGranted, purchaseDateMs, processedAtMs)
                    VALUES ('Production', ?, ?, ?, 'Production', 'coins.1000', 'coins', 1000000, ?, ?)
                    """)
            let ownership = try db.makeStatement(
                sql: """
                    INSERT INTO ownership (environment, originalTransactionId, accountId, scope, productId, boundAtMs)
                    VALUES ('Production', ?, ?, 'Production', 'coins.1000', ?)
                    """)
            let ledger = try db.makeStatement(
                sql: """
                    INSERT INTO ledger (accountId, scope, delta, balance, kind, environment, transactionId, idempotencyKey, memo, createdAtMs)
                    VALUES (?, 'Production', ?, ?, ?, ?, ?, ?, NULL, ?)
                    """)
            let wallet = try db.makeStatement(sql: "INSERT INTO wallet (accountId, scope, balance) VALUES (?, 'Production', ?)")
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
