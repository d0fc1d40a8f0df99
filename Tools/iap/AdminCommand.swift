import ArgumentParser
import Foundation
import IAPProtocol

/// `iap receive-notification`: what the edge's webhook does with Apple's POST.
struct ReceiveNotificationCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receive-notification",
        abstract: "fulfillment.receiveNotification: verify a signed notification, record it in the inbox, process it.")
    @Argument(help: "The signedPayload, a file holding it, or - for standard input (e.g. from `iap sim refund ID --json`).")
    var payload: String
    @OptionGroup var client: ClientOptions
    func run() async throws {
        await ServiceCall(options: client).run(
            .fulfillment, FulfillmentReceiveNotification.self, .init(signedPayload: try textArgument(payload))
        ) {
            "\($0.notificationUUID): \($0.state.rawValue)\($0.firstDelivery ? "" : " (delivered before; nothing done again)")"
        }
    }
}

/// `iap admin ...`: operator commands that need the admin token.
struct AdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin", abstract: "Operator commands (admin token).", subcommands: [Notifications.self, RetryNotification.self])

    struct Notifications: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.listNotifications: the notification inbox, newest first.",
            discussion: "--parked lists the ones processing gave up on; retry one with `iap admin retry-notification UUID`.")
        @Flag(help: "Only parked notifications (same as --state parked).") var parked = false
        @Option(help: "Only this state: pending, applied, ignored or parked.") var state: String?
        @Option(help: "At most this many (1-500, default 50).") var limit: Int?
        @Option(name: .customLong("admin-token"), help: "Admin token (default: IAP_ADMIN_TOKEN, else data/admin-token).") var adminToken: String?
        @OptionGroup var client: ClientOptions

        func validate() throws {
            if let state, NotificationState(rawValue: state) == nil {
                throw ValidationError("--state must be one of: \(NotificationState.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }

        func run() async throws {
            guard let token = resolveAdminToken(adminToken) else {
                throw ValidationError("no admin token: pass --admin-token or set IAP_ADMIN_TOKEN")
            }
            let filter = parked ? .parked : state.flatMap(NotificationState.init(rawValue:))
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentListNotifications.self, .init(adminToken: token, state: filter, limit: limit)
            ) {
                $0.notifications.isEmpty
                    ? "no notifications"
                    : table(
                        ["uuid", "type", "state", "attempts", "received", "last error"],
                        $0.notifications.map {
                            [
                                $0.notificationUUID, $0.notificationType + ($0.subtype.map { "/\($0)" } ?? ""), $0.state.rawValue,
                                String($0.attempts), isoTime($0.receivedAtMs), $0.lastError ?? "-",
                            ]
                        })
            }
        }
    }

    struct RetryNotification: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "retry-notification", abstract: "fulfillment.retryNotification: process a parked notification again now.")
        @Argument(help: "The notification's UUID (see `iap admin notifications --parked`).") var notificationUUID: String
        @Option(name: .customLong("admin-token"), help: "Admin token (default: IAP_ADMIN_TOKEN, else data/admin-token).") var adminToken: String?
        @OptionGroup var client: ClientOptions
        func run() async throws {
            guard let token = resolveAdminToken(adminToken) else {
                throw ValidationError("no admin token: pass --admin-token or set IAP_ADMIN_TOKEN")
            }
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentRetryNotification.self, .init(adminToken: token, notificationUUID: notificationUUID)
            ) {
                "\($0.notificationUUID): \($0.state.rawValue) after \($0.attempts) attempt(s)\($0.lastError.map { " (last error: \($0))" } ?? "")"
            }
        }
    }
}

/// `iap appstore ...`: Apple's App Store Server API through verification (internal token).
struct AppStoreCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "appstore", abstract: "Apple's App Store Server API through verification (internal token).",
        subcommands: [Transaction.self, History.self, Order.self])

    struct Token: ParsableArguments {
        @Option(name: .customLong("internal-token"), help: "Internal token (default: IAP_INTERNAL_TOKEN, else data/internal-token).")
        var internalToken: String?
        func resolved() throws -> String {
            guard let token = resolveToken(internalToken, env: "IAP_INTERNAL_TOKEN", file: "internal-token") else {
                throw ValidationError("no internal token: pass --internal-token or set IAP_INTERNAL_TOKEN")
            }
            return token
        }
    }

    struct Transaction: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "verification.transactionInfo: one transaction from Apple, verified.")
        @Argument(help: "Transaction id.") var transactionId: String
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationTransactionInfo.self, .init(internalToken: try token.resolved(), transactionId: transactionId)
            ) { answer in
                answer.status == 0
                    ? "VALID \(answer.environment ?? "") \(answer.transaction?["productId"]?.stringValue ?? "") transaction \(transactionId)"
                    : "INVALID status \(answer.status) \(answer.reason ?? "")"
            }
        }
    }

    struct Order: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "verification.lookUpOrder: the transactions of the order id on a customer's emailed receipt.")
        @Argument(help: "The order id (e.g. MK5TTTVWJH).") var orderId: String
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationLookUpOrder.self, .init(internalToken: try token.resolved(), orderId: orderId)
            ) { answer in
                answer.transactions.isEmpty ? "no order \(orderId) at Apple for this app" : historyTable(answer)
            }
        }
    }

    struct History: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "verification.transactionHistory: a customer's whole history from Apple.")
        @Argument(help: "Any transaction id of the customer.") var transactionId: String
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationTransactionHistory.self, .init(internalToken: try token.resolved(), transactionId: transactionId)
            ) { historyTable($0) }
        }
    }
}

/// Transactions from Apple as a table.
func historyTable(_ answer: VerificationTransactionHistory.Result) -> String {
    table(
        ["transaction", "original", "product", "environment", "status"],
        answer.transactions.map {
            [
                $0.transaction?["transactionId"]?.stringValue ?? "-", $0.transaction?["originalTransactionId"]?.stringValue ?? "-",
                $0.transaction?["productId"]?.stringValue ?? "-", $0.environment ?? "-", $0.status == 0 ? "valid" : "\($0.status)",
            ]
        })
}

/// `iap support ...`: what support staff need (admin token).
struct SupportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "support", abstract: "Support tools (admin token): orders and the audit log.", subcommands: [Order.self, Audit.self])

    struct Order: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.lookUpOrder: an order id from a customer's emailed receipt, its purchases and who owns them here.")
        @Argument(help: "The order id (e.g. MK5TTTVWJH).") var orderId: String
        @Option(name: .customLong("admin-token"), help: "Admin token (default: IAP_ADMIN_TOKEN, else data/admin-token).") var adminToken: String?
        @OptionGroup var client: ClientOptions
        func run() async throws {
            guard let token = resolveAdminToken(adminToken) else {
                throw ValidationError("no admin token: pass --admin-token or set IAP_ADMIN_TOKEN")
            }
            await ServiceCall(options: client).run(.fulfillment, FulfillmentLookUpOrder.self, .init(adminToken: token, orderId: orderId)) {
                $0.lines.isEmpty
                    ? "no order \($0.orderId) at Apple for this app"
                    : table(
                        ["transaction", "original", "product", "environment", "owner here"],
                        $0.lines.map {
                            [
                                $0.transactionId, $0.originalTransactionId, $0.productId, $0.environment,
                                $0.ownerAccountId ?? "nobody (never redeemed)",
                            ]
                        })
            }
        }
    }

    struct Audit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "fulfillment.listAudit: administrators' actions, newest first.")
        @Option(help: "At most this many (1-500, default 50).") var limit: Int?
        @Option(name: .customLong("admin-token"), help: "Admin token (default: IAP_ADMIN_TOKEN, else data/admin-token).") var adminToken: String?
        @OptionGroup var client: ClientOptions
        func run() async throws {
            guard let token = resolveAdminToken(adminToken) else {
                throw ValidationError("no admin token: pass --admin-token or set IAP_ADMIN_TOKEN")
            }
            await ServiceCall(options: client).run(.fulfillment, FulfillmentListAudit.self, .init(adminToken: token, limit: limit)) {
                $0.entries.isEmpty
                    ? "no administrator actions recorded"
                    : table(
                        ["when", "action", "account", "transaction", "reason", "credential"],
                        $0.entries.map { [isoTime($0.atMs), $0.action, $0.accountId ?? "-", $0.transactionId ?? "-", $0.reason, $0.credential] })
            }
        }
    }
}
