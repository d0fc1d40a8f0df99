import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC

// What support reads and does about one customer: `iap support account`, `iap support adjust`, `iap accounts get`.

extension SupportCommand {
    struct Account: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "fulfillment.getCustomer: a customer's coins, debt, entitlements, purchases and ledger, by account id or by any transaction id.")
        @Argument(help: "The account id (or give --transaction-id).") var accountId: String?
        @Option(name: .customLong("transaction-id"), help: "A transaction or original transaction id of one of the customer's purchases.")
        var transactionId: String?
        @Option(name: .customLong("ledger-limit"), help: "Ledger rows per scope, newest first (1-500, default 100).") var ledgerLimit: Int?
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func validate() throws {
            guard (accountId == nil) != (transactionId == nil) else { throw ValidationError("give an account id or --transaction-id") }
        }
        func run() async throws {
            let token = try admin.resolved()
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentGetCustomer.self,
                .init(adminToken: token, accountId: accountId, transactionId: transactionId, ledgerLimit: ledgerLimit)
            ) { Self.describe($0) }
        }

        static func describe(_ c: FulfillmentGetCustomer.Result) -> String {
            var out = ["account \(c.accountId)"]
            for scope in c.scopes {
                out.append("\(scope.environment.rawValue): balance \(scope.balance), owed \(scope.owed)")
                for e in scope.entitlements {
                    out.append("  \(e.entitlement) (\(e.productId)) \(e.expiresAtMs.map { "until \(isoTime($0))" } ?? "permanent")")
                }
                if !scope.ledger.isEmpty {
                    out.append(
                        table(
                            ["id", "when", "kind", "delta", "balance", "transaction", "memo"],
                            scope.ledger.map {
                                [
                                    "\($0.id)", isoTime($0.createdAtMs), $0.kind.rawValue, "\($0.delta)", "\($0.balance)", $0.transactionId ?? "-",
                                    $0.memo ?? "",
                                ]
                            }))
                }
            }
            if !c.purchases.isEmpty {
                out.append(
                    table(
                        ["transaction", "original", "product", "environment", "state", "bought"],
                        c.purchases.map {
                            [$0.transactionId, $0.originalTransactionId, $0.productId, $0.environment, $0.state.rawValue, isoTime($0.purchaseDateMs)]
                        }))
            }
            return out.joined(separator: "\n")
        }
    }

    struct Adjust: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "fulfillment.adjustCoins: give (--delta 50) or take back (--delta -50) coins as an audited ledger adjustment. Retrying with the same --key never adjusts twice."
        )
        @Argument(help: "The account id.") var accountId: String
        @Option(help: "Coins to give (positive) or take back (negative).") var delta: Int64
        @Option(help: "Why, for the ledger and the audit log (e.g. the ticket).") var reason: String
        @Option(help: "Idempotency key (default: a new random one; pass your own to retry safely).") var key: String?
        @Option(name: .customLong("operator"), help: "Who is acting, for the audit log.") var operatorName: String?
        @OptionGroup var scope: ScopeOption
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try admin.resolved()
            let key = self.key ?? UUID().uuidString.lowercased()
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentAdjustCoins.self,
                .init(
                    adminToken: token, accountId: accountId, environment: scope.scope, delta: delta, reason: reason, idempotencyKey: key,
                    operatorName: operatorName)
            ) {
                "\($0.applied ? "adjusted" : "already adjusted with key \(key):") \($0.entry.delta) coins (ledger row \($0.entry.id)); balance \($0.balance) (\($0.environment.rawValue))"
            }
        }
    }
}

extension AccountsCommand {
    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Internal: an account's username, appAccountToken and age (accounts.getAccount).")
        @Argument(help: "Account id.") var accountId: String
        @OptionGroup var internalToken: InternalTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try internalToken.resolved()
            await ServiceCall(options: client).run(.accounts, AccountsGetAccount.self, .init(accountId: accountId, internalToken: token)) {
                "account \($0.accountId): username \($0.username), appAccountToken \($0.appAccountToken), created \(isoTime($0.createdAtMs))"
            }
        }
    }
}

extension SupportCommand {
    struct Overview: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.getOverview: Production purchases, grants, refunds and revenue per currency per day, and what waits.")
        @Option(help: "Days back, today included (1-90, default 30).") var days: Int?
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try admin.resolved()
            await ServiceCall(options: client).run(.fulfillment, FulfillmentGetOverview.self, .init(adminToken: token, days: days)) { o in
                table(
                    ["day (UTC)", "purchases", "grants", "refunds", "revenue", "unpriced"],
                    o.days.map { d in
                        [
                            isoTime(d.dayStartMs).prefix(10).description, "\(d.purchases)", "\(d.grants)", "\(d.refunds)",
                            d.revenue.map { "\($0.currency) \(Double($0.milliunits) / 1000)" }.joined(separator: ", "), "\(d.unpriced)",
                        ]
                    })
                    + "\nsubscriptions in force \(o.activeSubscriptions), parked notifications \(o.parkedNotifications), waiting at the stores \(o.waitingAtStores)"
            }
        }
    }
}

extension SupportCommand {
    struct SignOut: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "sign-out", abstract: "fulfillment.signOutCustomer: sign a customer out of all devices (audited).")
        @Argument(help: "The account id.") var accountId: String
        @Option(help: "Why, for the audit log.") var reason: String
        @Option(name: .customLong("operator"), help: "Who is acting, for the audit log.") var operatorName: String?
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try admin.resolved()
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentSignOutCustomer.self,
                .init(adminToken: token, accountId: accountId, reason: reason, operatorName: operatorName)
            ) { "account \(accountId): \($0.ended) session(s) ended" }
        }
    }
}

extension AdminCommand {
    struct DismissNotification: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "dismiss-notification", abstract: "fulfillment.dismissNotification: set a parked notification aside for good (audited).")
        @Argument(help: "The notification's UUID (see `iap admin notifications --parked`).") var notificationUUID: String
        @Option(help: "Why, for the audit log.") var reason: String
        @Option(name: .customLong("operator"), help: "Who is acting, for the audit log.") var operatorName: String?
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try admin.resolved()
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentDismissNotification.self,
                .init(adminToken: token, notificationUUID: notificationUUID, reason: reason, operatorName: operatorName)
            ) { "\($0.notificationUUID): \($0.state.rawValue) (\($0.lastError ?? ""))" }
        }
    }
}

extension AccountsCommand {
    struct RevokeSessions: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke-sessions", abstract: "Internal: end every session of an account (accounts.revokeSessions).")
        @Argument(help: "Account id.") var accountId: String
        @OptionGroup var internalToken: InternalTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try internalToken.resolved()
            await ServiceCall(options: client).run(.accounts, AccountsRevokeSessions.self, .init(accountId: accountId, internalToken: token)) {
                "account \(accountId): \($0.ended) session(s) ended"
            }
        }
    }
}
