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
    @OptionGroup var token: InternalTokenOption
    func run() async throws {
        await ServiceCall(options: client).run(
            .fulfillment, FulfillmentReceiveNotification.self,
            .init(signedPayload: try textArgument(payload), internalToken: try token.resolved())
        ) {
            "\($0.notificationUUID): \($0.state.rawValue)\($0.firstDelivery ? "" : " (delivered before; nothing done again)")"
        }
    }
}

/// `iap admin ...`: operator commands that need the admin token.
struct AdminCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "admin", abstract: "Operator commands (admin token).",
        subcommands: [
            Notifications.self, RetryNotification.self, DismissNotification.self, Outbox.self, Reconcile.self, DataBackupCommand.self,
            DataRestoreCommand.self,
        ])

    struct Reconcile: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "fulfillment.reconcile: take in notifications the inbox missed (Notification History, Google Play's voided purchases) and check stale subscriptions at Apple."
        )
        @Flag(name: .customLong("no-history"), help: "Skip Notification History.") var noHistory = false
        @Flag(name: .customLong("no-statuses"), help: "Skip the subscription status sweep.") var noStatuses = false
        @Flag(name: .customLong("no-play"), help: "Skip Google Play (its voided purchases and the subscription sweep).") var noPlay = false
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try admin.resolved()
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentReconcile.self,
                .init(adminToken: token, notificationHistory: !noHistory, subscriptionStatuses: !noStatuses, googlePlay: !noPlay)
            ) {
                "notifications: \($0.notificationsSeen) listed by Apple, \($0.notificationsTakenIn) taken in; "
                    + "subscriptions: \($0.subscriptionsChecked) checked, \($0.subscriptionsUpdated) updated; "
                    + "Google Play voids: \($0.playVoidsSeen) listed, \($0.playVoidsTakenIn) taken in; "
                    + "Google Play subscriptions: \($0.playSubscriptionsChecked) checked, \($0.playSubscriptionsUpdated) updated"
            }
        }
    }

    struct Outbox: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.listOutbox: what is owed to outside parties after commits (ties at Apple, ...), oldest first.",
            discussion: "Items are retried until delivered (5 s doubling to hourly) and never dropped; the last error says why one waits.")
        @Option(help: "At most this many (1-500, default 50).") var limit: Int?
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions

        func run() async throws {
            let token = try admin.resolved()
            await ServiceCall(options: client).run(.fulfillment, FulfillmentListOutbox.self, .init(adminToken: token, limit: limit)) {
                $0.items.isEmpty
                    ? "the outbox is empty"
                    : table(
                        ["kind", "key", "attempts", "since", "next attempt", "last error"],
                        $0.items.map {
                            [$0.kind, $0.key, String($0.attempts), isoTime($0.createdAtMs), isoTime($0.nextAttemptAtMs), $0.lastError ?? "-"]
                        }) + "\n\($0.total) item(s); the oldest waited \(($0.oldestAgeMs ?? 0) / 1000) s"
            }
        }
    }

    struct Notifications: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.listNotifications: the notification inbox, newest first.",
            discussion: "--parked lists the ones processing gave up on; retry one with `iap admin retry-notification UUID`.")
        @Flag(help: "Only parked notifications (same as --state parked).") var parked = false
        @Option(help: "Only this state: pending, applied, ignored or parked.") var state: String?
        @Option(help: "At most this many (1-500, default 50).") var limit: Int?
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions

        func validate() throws {
            if let state, NotificationState(rawValue: state) == nil {
                throw ValidationError("--state must be one of: \(NotificationState.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }

        func run() async throws {
            let token = try admin.resolved()
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
        @Option(name: .customLong("operator"), help: "Who is acting, for the audit log.") var operatorName: String?
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try admin.resolved()
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentRetryNotification.self,
                .init(adminToken: token, notificationUUID: notificationUUID, operatorName: operatorName)
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
        subcommands: [
            Transaction.self, History.self, Order.self, Status.self, Refunds.self, Notifications.self, TestNotification.self,
            Consumption.self, SetToken.self, Extend.self, Finish.self, AppTransaction.self, MassExtend.self, MassExtendStatus.self, Retention.self,
        ])

    /// production or sandbox.
    struct EnvironmentOption: ParsableArguments {
        @Option(help: "production (default) or sandbox: which of Apple's hosts.") var environment = "production"
        func validate() throws {
            guard ["production", "sandbox"].contains(environment) else { throw ValidationError("--environment must be production or sandbox") }
        }
        var apple: AppleEnvironment { environment == "sandbox" ? .sandbox : .production }
    }

    typealias Token = InternalTokenOption

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

extension AppStoreCommand {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "verification.subscriptionStatuses: every subscription of a customer, its status and renewal info.")
        @Argument(help: "Any transaction id of the customer.") var transactionId: String
        @Option(parsing: .upToNextOption, help: "Only these statuses (1 active, 2 expired, 3 billing retry, 4 grace period, 5 revoked).")
        var status: [Int] = []
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationSubscriptionStatuses.self,
                .init(internalToken: try token.resolved(), transactionId: transactionId, statuses: status.isEmpty ? nil : status)
            ) { answer in
                let names = [1: "active", 2: "expired", 3: "billing retry", 4: "grace period", 5: "revoked"]
                return answer.subscriptions.isEmpty
                    ? "no subscriptions"
                    : table(
                        ["original", "product", "status", "expires", "auto-renew"],
                        answer.subscriptions.map {
                            [
                                $0.originalTransactionId, $0.transaction["productId"]?.stringValue ?? "-", names[$0.status] ?? "\($0.status)",
                                $0.transaction["expiresDate"]?.millisecondsValue.map(isoTime) ?? "-",
                                $0.renewalInfo["autoRenewStatus"]?.intValue == 1 ? "on" : "off",
                            ]
                        })
            }
        }
    }

    struct Refunds: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "verification.refundHistory: every refunded transaction of a customer.")
        @Argument(help: "Any transaction id of the customer.") var transactionId: String
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationRefundHistory.self, .init(internalToken: try token.resolved(), transactionId: transactionId)
            ) { $0.transactions.isEmpty ? "no refunds" : historyTable($0) }
        }
    }

    struct Notifications: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "verification.notificationHistory: notifications Apple sent (or tried to), with each send attempt; one page.")
        @Option(help: "How many days back (1-180, default 7).") var days = 7
        @Option(help: "Only this notificationType (e.g. REFUND).") var type: String?
        @Option(name: .customLong("transaction-id"), help: "Only notifications about this customer's purchase.") var transactionId: String?
        @Flag(name: .customLong("only-failures"), help: "Only notifications that never reached this server.") var onlyFailures = false
        @Option(name: .customLong("page"), help: "The paginationToken printed by the previous page.") var paginationToken: String?
        @OptionGroup var environment: EnvironmentOption
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func validate() throws {
            guard (1...180).contains(days) else { throw ValidationError("--days must be 1-180") }
        }
        func run() async throws {
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            await ServiceCall(options: client).run(
                .verification, VerificationNotificationHistory.self,
                .init(
                    internalToken: try token.resolved(), environment: environment.apple, startDateMs: now - Int64(days) * 86_400_000,
                    endDateMs: now + 60_000, notificationType: type, transactionId: transactionId, onlyFailures: onlyFailures ? true : nil,
                    paginationToken: paginationToken)
            ) { answer in
                let rows = answer.notifications.map {
                    [
                        $0.signedDateMs.map(isoTime) ?? "-", [$0.notificationType, $0.subtype].compactMap { $0 }.joined(separator: "/"),
                        $0.notificationUUID ?? "-", $0.sendAttempts.map(\.result).joined(separator: ","),
                    ]
                }
                let next = answer.hasMore ? "\nmore: --page \(answer.paginationToken ?? "")" : ""
                return (rows.isEmpty ? "no notifications" : table(["signed", "type", "uuid", "attempts"], rows)) + next
            }
        }
    }

    struct TestNotification: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "test-notification",
            abstract: "Ask Apple to send a TEST notification (verification.requestTestNotification), or read its status with --status TOKEN.")
        @Option(help: "A token from an earlier request: print how its delivery went.") var status: String?
        @OptionGroup var environment: EnvironmentOption
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let internalToken = try token.resolved()
            if let status {
                await ServiceCall(options: client).run(
                    .verification, VerificationTestNotificationStatus.self,
                    .init(internalToken: internalToken, environment: environment.apple, testNotificationToken: status)
                ) { record in
                    "TEST notification \(record.notificationUUID ?? "-"): "
                        + (record.sendAttempts.isEmpty
                            ? "not sent yet" : record.sendAttempts.map { "\(isoTime($0.attemptDateMs)) \($0.result)" }.joined(separator: ", "))
                }
            } else {
                await ServiceCall(options: client).run(
                    .verification, VerificationRequestTestNotification.self, .init(internalToken: internalToken, environment: environment.apple)
                ) { "requested; token \($0.testNotificationToken) (iap appstore test-notification --status \($0.testNotificationToken))" }
            }
        }
    }
}

extension AppStoreCommand {
    struct Consumption: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "verification.sendConsumption: answer Apple's consumption request for a refund (fields as Apple's ConsumptionRequest, JSON).")
        @Argument(help: "The transaction the customer asked a refund for.") var transactionId: String
        @Option(
            help:
                "A JSON file with Apple's ConsumptionRequest fields (customerConsented, deliveryStatus, sampleContentProvided, consumptionPercentage, refundPreference)."
        ) var file: String
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let info: AppleConsumptionRequest
            do {
                info = try JSONDecoder().decode(AppleConsumptionRequest.self, from: Data(contentsOf: URL(fileURLWithPath: file)))
            } catch {
                throw ValidationError("\(file) is not a ConsumptionRequest: \(error)")
            }
            await ServiceCall(options: client).run(
                .verification, VerificationSendConsumption.self,
                .init(internalToken: try token.resolved(), transactionId: transactionId, consumption: info)
            ) { _ in "consumption information sent for \(transactionId)" }
        }
    }

    struct Finish: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "verification.finishTransaction: mark a transaction finished at Apple, so the device stops delivering it (fulfillment does this for every grant)."
        )
        @Argument(help: "The transaction id.") var transactionId: String
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationFinishTransaction.self, .init(internalToken: try token.resolved(), transactionId: transactionId)
            ) { _ in "\(transactionId) is finished at Apple" }
        }
    }

    struct SetToken: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-token",
            abstract: "verification.setAppAccountToken: tie an original transaction to an account's appAccountToken at Apple.")
        @Argument(help: "Original transaction id.") var originalTransactionId: String
        @Argument(help: "The account's appAccountToken (UUID).") var appAccountToken: String
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationSetAppAccountToken.self,
                .init(internalToken: try token.resolved(), originalTransactionId: originalTransactionId, appAccountToken: appAccountToken)
            ) { _ in "\(originalTransactionId) now carries \(appAccountToken) at Apple" }
        }
    }

    struct Extend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "verification.extendRenewalDate: extend at Apple only (support's `iap support extend` also records it here).")
        @Argument(help: "Original transaction id.") var originalTransactionId: String
        @Option(help: "Days (1-90).") var days: Int
        @Option(name: .customLong("reason-code"), help: "0 undeclared, 1 customer satisfaction, 2 other, 3 service issue.") var reasonCode = 1
        @Option(name: .customLong("request-id"), help: "Unique per extension (default: a new UUID).") var requestId = UUID().uuidString
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationExtendRenewalDate.self,
                .init(
                    internalToken: try token.resolved(), originalTransactionId: originalTransactionId, extendByDays: days,
                    extendReasonCode: reasonCode, requestIdentifier: requestId)
            ) { "renews \($0.effectiveDateMs.map(isoTime) ?? "-") (success \($0.success))" }
        }
    }
}

/// `--internal-token`, else IAP_INTERNAL_TOKEN, else data/internal-token: for the internal methods.
struct InternalTokenOption: ParsableArguments {
    @Option(name: .customLong("internal-token"), help: "Internal token (default: IAP_INTERNAL_TOKEN, else data/internal-token).")
    var internalToken: String?
    func resolved() throws -> String {
        guard let token = try resolveToken(internalToken, env: "IAP_INTERNAL_TOKEN", file: "internal-token") else {
            throw ValidationError("no internal token: pass --internal-token or set IAP_INTERNAL_TOKEN")
        }
        return token
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
        commandName: "support", abstract: "Support tools (admin token): orders, extensions and the audit log.",
        subcommands: [Order.self, Extend.self, ExtendStatus.self, Audit.self, Customer.self, Account.self, Adjust.self, Overview.self, SignOut.self])

    struct Order: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "fulfillment.lookUpOrder: an order id from a customer's emailed receipt, its purchases and who owns them here.")
        @Argument(help: "The order id (e.g. MK5TTTVWJH).") var orderId: String
        @Option(name: .customLong("grant-to"), help: "Grant the order's purchases to this username (fulfillment.grantOrder; audited).")
        var grantTo: String?
        @Option(help: "Why, for the audit log (required with --grant-to), e.g. the ticket number.") var reason: String?
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func validate() throws {
            if grantTo != nil, reason == nil { throw ValidationError("--grant-to needs --reason (it is kept in the audit log)") }
        }
        func run() async throws {
            let token = try admin.resolved()
            if let grantTo {
                await ServiceCall(options: client).run(
                    .fulfillment, FulfillmentGrantOrder.self, .init(adminToken: token, orderId: orderId, username: grantTo, reason: reason ?? "")
                ) {
                    "order \($0.orderId) for account \($0.accountId)\n"
                        + table(
                            ["transaction", "product", "outcome"], $0.results.map { [$0.transactionId, $0.productId, $0.outcome.rawValue] })
                }
                return
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

    struct Extend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "fulfillment.extendSubscription: move a subscription's renewal date later, at Apple and here; with --all, every active subscriber of --product (fulfillment.extendAllSubscriptions). Audited."
        )
        @Argument(help: "The subscription's original transaction id (not with --all).") var originalTransactionId: String?
        @Flag(help: "Every active subscriber of --product (Apple's mass extension, carried out afterwards).") var all = false
        @Option(help: "With --all: the subscription product.") var product: String?
        @Option(help: "With --all: only subscribers of this storefront (ISO 3166-1 alpha-3, e.g. USA); repeatable.") var storefront: [String] = []
        @OptionGroup var environment: AppStoreCommand.EnvironmentOption
        @Option(help: "Days to add (1-90).") var days: Int
        @Option(name: .customLong("reason-code"), help: "Apple's code: 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue.")
        var reasonCode = 1
        @Option(help: "Why, for the audit log.") var reason: String
        @Option(name: .customLong("request-id"), help: "Makes a retry safe: the same id is not extended twice.") var requestId: String?
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func validate() throws {
            guard all == (originalTransactionId == nil), all == (product != nil) else {
                throw ValidationError("give an original transaction id, or --all with --product")
            }
            if !all, !storefront.isEmpty { throw ValidationError("--storefront goes with --all") }
        }
        func run() async throws {
            let token = try admin.resolved()
            if all, let product {
                // Made here and shown first: if the answer is lost, the same --request-id again is the same request at Apple.
                let id = requestId ?? UUID().uuidString.lowercased()
                FileHandle.standardError.write(Data("mass extension \(id): asking Apple (retry with --request-id \(id))\n".utf8))
                await ServiceCall(options: client).run(
                    .fulfillment, FulfillmentExtendAllSubscriptions.self,
                    .init(
                        adminToken: token, productId: product, days: days, reasonCode: reasonCode, reason: reason,
                        storefrontCountryCodes: storefront.isEmpty ? nil : storefront, requestId: id, environment: environment.apple)
                ) {
                    "mass extension \($0.requestIdentifier) requested at Apple (\($0.environment.rawValue)); iap support extend-status \($0.requestIdentifier) --product \(product)"
                }
                return
            }
            // The same for one subscription: a rerun after a lost answer must not spend Apple's second extension of the year.
            let id = requestId ?? UUID().uuidString.lowercased()
            FileHandle.standardError.write(Data("extension \(id): asking Apple (retry with --request-id \(id))\n".utf8))
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentExtendSubscription.self,
                .init(
                    adminToken: token, originalTransactionId: originalTransactionId ?? "", days: days, reasonCode: reasonCode, reason: reason,
                    requestId: id)
            ) { "subscription \($0.originalTransactionId) now ends \(isoTime($0.expiresAtMs))\($0.accountId.map { " (account \($0))" } ?? "")" }
        }
    }

    struct Audit: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "fulfillment.listAudit: administrators' actions, newest first.")
        @Option(help: "At most this many (1-500, default 50).") var limit: Int?
        @Option(help: "Only the entries about this account id.") var account: String?
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try admin.resolved()
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentListAudit.self, .init(adminToken: token, limit: limit, accountId: account)
            ) {
                $0.entries.isEmpty
                    ? "no administrator actions recorded"
                    : table(
                        ["when", "action", "account", "transaction", "reason", "operator", "credential"],
                        $0.entries.map {
                            [
                                isoTime($0.atMs), $0.action, $0.accountId ?? "-", $0.transactionId ?? "-", $0.reason, $0.operatorName ?? "-",
                                $0.credential,
                            ]
                        })
            }
        }
    }
}
