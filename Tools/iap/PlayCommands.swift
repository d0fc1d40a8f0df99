import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import RPCTransport

/// `iap play ...`: drive the Google Play simulator (buy, acknowledgement state, void, subscription events, the clock,
/// push faults, the service-account key).
struct PlayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "play", abstract: "Drive the local Google Play simulator (play-sim).",
        subcommands: [
            Key.self, Buy.self, Show.self, Subscription.self, VoidPurchase.self, AdvanceClock.self, Push.self, PushFault.self, Deliver.self,
            Fault.self,
        ])

    struct Common: ParsableArguments {
        @Option(help: "Simulator address (default IAP_PLAY_ADDR, else 127.0.0.1:7106).") var addr: String?
        @Flag(help: "Print the simulator's answer as JSON.") var json = false
    }

    static func run<M: RPCMethod>(_ method: M.Type, _ params: M.Params, _ common: Common, human: (M.Result) -> String) async throws {
        await ServiceCall(addr: common.addr, json: common.json).run(.play, M.self, params, human: human)
    }

    static func describe(_ p: PlayPurchaseState) -> String {
        var line = "\(p.productId)\(p.basePlanId.map { "/\($0)" } ?? "") \(p.state), token \(p.purchaseToken), order \(p.orderIds.last ?? "")"
        line += p.acknowledged ? ", acknowledged" : ", NOT acknowledged\(p.acknowledgementDeadlineMs.map { " (refunded at \($0))" } ?? "")"
        if p.consumed { line += ", consumed" }
        if let expiry = p.expiryTimeMs { line += ", expires \(expiry)\(p.autoRenewing == true ? " (renewing)" : "")" }
        return line
    }

    struct Key: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "The service-account key file the simulator's token endpoint accepts (written with --output, mode 0600).")
        @OptionGroup var common: Common
        @Option(help: "Write the key file (JSON with the private key) here, mode 0600.") var output: String?
        func run() async throws {
            try await PlayCommand.run(PlayServiceAccountKey.self, EmptyParams(), common) { key in
                guard let output else { return "client_email \(key.clientEmail) (--output FILE writes the key file)" }
                guard writePrivateFile(Array(key.keyFile.utf8), to: output) else { return "could not write \(output)" }
                return "client_email \(key.clientEmail); key file written to \(output) (0600)"
            }
        }
    }

    struct Buy: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Buy a one-time product, or subscribe with --base-plan.")
        @OptionGroup var common: Common
        @Argument(help: "Product (or subscription) id.") var productId: String
        @Option(name: .customLong("package"), help: "Package name.") var packageName = "com.example.game"
        @Option(name: .customLong("base-plan"), help: "Subscribe to this base plan.") var basePlanId: String?
        @Option(help: "The base plan's billing period: P1W, P1M, P3M, P6M or P1Y.") var period: PlayBillingPeriod?
        @Option(name: .customLong("account-id"), help: "obfuscatedExternalAccountId (the suite: the account's appAccountToken).")
        var accountId: String?
        @Option(help: "Quantity (one-time products).") var quantity: Int?
        @Flag(help: "A license tester's purchase (accelerated periods, five-minute acknowledgement window).") var test = false
        @Option(name: .customLong("replacing"), help: "The purchase token of the subscription this one replaces (linkedPurchaseToken).")
        var replacing: String?
        @Option(
            name: .customLong("replacement-mode"),
            help: "With --replacing: CHARGE_FULL_PRICE (at once, the default) or DEFERRED (the new plan when the old one's period ends).")
        var replacementMode: PlayReplacementMode?
        func run() async throws {
            try await PlayCommand.run(
                PlayPurchaseProduct.self,
                .init(
                    packageName: packageName, productId: productId, basePlanId: basePlanId, billingPeriod: period,
                    obfuscatedExternalAccountId: accountId, quantity: quantity, testPurchase: test, linkedPurchaseToken: replacing,
                    replacementMode: replacementMode), common,
                human: PlayCommand.describe)
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "A purchase's state: acknowledged, consumed, orders, expiry.")
        @OptionGroup var common: Common
        @Argument(help: "Purchase token.") var purchaseToken: String
        func run() async throws {
            try await PlayCommand.run(PlayGetPurchase.self, .init(purchaseToken: purchaseToken), common, human: PlayCommand.describe)
        }
    }

    struct Subscription: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "cancel, restart, declinePayment, fixPayment, pause (with --days) or resume a subscription.")
        @OptionGroup var common: Common
        @Argument(help: "Purchase token.") var purchaseToken: String
        @Argument(help: "cancel, restart, declinePayment, fixPayment, pause or resume.") var action: PlaySubscriptionAction
        @Option(help: "Days of a pause (7-90).") var days: Int?
        func run() async throws {
            try await PlayCommand.run(
                PlaySubscriptionEvent.self, .init(purchaseToken: purchaseToken, action: action, pauseDays: days), common,
                human: PlayCommand.describe)
        }
    }

    struct VoidPurchase: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "void",
            abstract: "Refund and revoke a purchase outside the app (a voided purchase): --reason chargeback for a chargeback.")
        @OptionGroup var common: Common
        @Argument(help: "Purchase token.") var purchaseToken: String
        @Option(help: "user (default), developer or google.") var source: PlayVoidSource?
        @Option(help: "remorse (default), chargeback, fraud, friendlyFraud, notReceived, defective, accidentalPurchase or other.")
        var reason: PlayVoidReason?
        @Option(help: "Refund only this many of a one-time purchase's quantity.") var quantity: Int?
        func run() async throws {
            try await PlayCommand.run(
                PlayRefund.self, .init(purchaseToken: purchaseToken, source: source, reason: reason, quantity: quantity), common,
                human: PlayCommand.describe)
        }
    }

    struct AdvanceClock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "advance-clock", abstract: "Move the simulated clock: renewals, grace, hold, expiries and three-day refunds.")
        @OptionGroup var common: Common
        @Option(help: "Days to move forward.") var days: Int64 = 0
        @Option(help: "Seconds to move forward.") var seconds: Int64 = 0
        func run() async throws {
            try await PlayCommand.run(PlayAdvanceClock.self, .init(seconds: days * 86_400 + seconds), common) {
                "now \($0.nowMs); \($0.notifications) notification(s)"
            }
        }
    }

    struct Push: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "push-endpoint", abstract: "Where real-time developer notifications are pushed (no URL: nowhere).")
        @OptionGroup var common: Common
        @Argument(help: "The push endpoint URL.") var url: String?
        @Option(help: "The OIDC token's audience (default: the URL).") var audience: String?
        @Option(help: "The service account the pushes authenticate as (the token's email).") var email: String?
        func run() async throws {
            try await PlayCommand.run(PlaySetPushEndpoint.self, .init(url: url, audience: audience, serviceAccountEmail: email), common) { _ in
                url.map { "notifications are pushed to \($0)" } ?? "notifications are not pushed"
            }
        }
    }

    struct PushFault: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "push-fault", abstract: "Make pushes misbehave: drop, duplicate, delay, reorder.")
        @OptionGroup var common: Common
        @Option(name: .customLong("drop"), help: "Percent of pushes dropped.") var dropPercent: Int?
        @Option(name: .customLong("duplicate"), help: "Percent of pushes sent twice.") var duplicatePercent: Int?
        @Option(name: .customLong("delay-ms"), help: "Wait before each push.") var delayMs: Int?
        @Flag(help: "Push in a random order.") var reorder = false
        func run() async throws {
            try await PlayCommand.run(
                PlaySetPushFault.self, .init(dropPercent: dropPercent, duplicatePercent: duplicatePercent, delayMs: delayMs, reorder: reorder),
                common
            ) { _ in "push faults set" }
        }
    }

    struct Deliver: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Push every notification due now; prints what happened.")
        @OptionGroup var common: Common
        func run() async throws {
            try await PlayCommand.run(PlayDeliverNotifications.self, EmptyParams(), common) {
                "attempted \($0.attempted), delivered \($0.delivered), pending \($0.pending)"
            }
        }
    }
}

extension PlayCommand {
    struct Fault: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make the Play Developer API answer http503 or http429 (none: normal).")
        @OptionGroup var common: Common
        @Argument(help: "none, http503 or http429.") var mode: PlayFaultMode
        @Option(help: "Requests affected (default: until changed).") var count: Int?
        func run() async throws {
            try await PlayCommand.run(PlaySetFault.self, .init(mode: mode, count: count), common) { _ in "Play Developer API: \(mode.rawValue)" }
        }
    }
}

extension PlayFaultMode: ExpressibleByArgument {}
extension PlayBillingPeriod: ExpressibleByArgument {}
extension PlayReplacementMode: ExpressibleByArgument {}
extension PlaySubscriptionAction: ExpressibleByArgument {}
extension PlayVoidSource: ExpressibleByArgument {}
extension PlayVoidReason: ExpressibleByArgument {}
