import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import RPCTransport

/// `iap sim ...`: drive the App Store simulator (buy, finish, restore, refund, advance the clock, receipt).
struct SimCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sim", abstract: "Drive the local App Store simulator.",
        subcommands: [
            Buy.self, Finish.self, Restore.self, Refund.self, AdvanceClock.self, Receipt.self, TrustAnchor.self, Fault.self, APIKey.self,
            NotificationURL.self, Deliver.self, AutoRenew.self, Consumption.self, NotificationFault.self, Billing.self, RefundDecision.self,
            LifecycleEvent.self, Notify.self, OfferKey.self, Revoke.self, ServerFinishes.self, AppTransaction.self, RealtimeURL.self,
            CancelIntent.self, Review.self, ShareFamily.self,
        ])

    struct Common: ParsableArguments {
        @Option(help: "Simulator address (default IAP_SIM_ADDR, else 127.0.0.1:7105).") var addr: String?
        @Option(name: .customLong("apple-id"), help: "Simulated Apple ID.") var appleId = "tester@example.com"
        @Option(name: .customLong("bundle-id"), help: "App bundle id (default: the first of IAP_BUNDLE_IDS, else com.example.game).")
        var bundleIdOption: String?
        @Option(help: "production (default) or sandbox: the App Store environment of purchases, receipts and restores.")
        var environment: SimEnvironment = .production
        @Flag(help: "Print the simulator's answer as JSON.") var json = false

        var bundleId: String { bundleIdOption ?? defaultBundleId() }

        var simEnvironment: SimEnvironment { environment }
        var receiptOptions: SimReceiptOptions { SimReceiptOptions(environment: simEnvironment) }

    }

    /// Calls, prints (the raw JSON answer, or a short human form), and maps failures to exit codes.
    static func run<M: RPCMethod>(
        _ method: M.Type, _ params: M.Params, _ common: Common,
        human: (M.Result) -> String
    ) async throws {
        await ServiceCall(addr: common.addr, json: common.json).run(.sim, M.self, params, human: human)
    }

    struct Buy: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Buy a product; prints the transaction ids (receipt and JWS with --json).")
        @OptionGroup var common: Common
        @Argument(help: "Product id.") var productId: String
        @Option(help: "consumable, nonConsumable, autoRenewable or nonRenewing.") var type: String = "consumable"
        @Option(help: "Quantity (consumables).") var quantity: Int = 1
        @Option(name: .customLong("app-account-token"), help: "The account's appAccountToken (UUID).") var appAccountToken: String?
        @Option(name: .customLong("device-identifier"), help: "identifierForVendor (UUID) for the receipt's device hash.")
        var deviceIdentifier: String?
        @Option(
            help: "A signed promotional offer: the JSON `iap offers sign --json` prints (a file, - for standard input, or the JSON itself).")
        var offer: String?
        @Option(help: "What the customer paid, e.g. 0.99 with --currency USD: into the signed transaction as Apple's price (milliunits).")
        var price: String?
        @Option(help: "ISO 4217 currency of --price, e.g. USD.") var currency: String?
        @Option(name: .customLong("period-days"), help: "autoRenewable: the period in days (default: the product's, else 30).")
        var periodDays: Int?

        func validate() throws {
            guard (price == nil) == (currency == nil) else { throw ValidationError("--price and --currency go together") }
            if let price, Decimal(string: price, locale: Locale(identifier: "en_US_POSIX")).map({ $0 >= 0 }) != true {
                throw ValidationError("--price is a decimal amount such as 0.99")
            }
        }

        func run() async throws {
            let milliunits = price.flatMap { Decimal(string: $0, locale: Locale(identifier: "en_US_POSIX")) }.map {
                NSDecimalNumber(decimal: $0 * 1000).int64Value
            }
            guard let productType = ProductType(rawValue: type) else {
                throw ValidationError("--type must be consumable, nonConsumable, autoRenewable or nonRenewing")
            }
            var promotional: SimPromotionalOffer?
            if let offer {
                let text = offer.hasPrefix("{") ? offer : try textArgument(offer)
                guard let signed = try? JSONDecoder().decode(FulfillmentSignOffer.Result.self, from: Data(text.utf8)) else {
                    throw ValidationError("--offer is not the JSON of a signed offer (iap offers sign PRODUCT OFFER --json)")
                }
                promotional = .init(
                    offerIdentifier: signed.offerId, keyIdentifier: signed.keyId, nonce: signed.nonce, timestamp: signed.timestamp,
                    signature: signed.signature)
            }
            try await SimCommand.run(
                SimPurchase.self,
                .init(
                    appleId: common.appleId, bundleId: common.bundleId, productId: productId,
                    productType: productType, quantity: quantity,
                    deviceIdentifier: deviceIdentifier, appAccountToken: appAccountToken, subscriptionPeriodDays: periodDays,
                    environment: common.simEnvironment, offer: promotional, price: milliunits, currency: currency),
                common
            ) {
                "bought \(productId) (\($0.environment)): transaction \($0.transactionId) (original \($0.originalTransactionId))"
                    + ($0.orderId.map { ", order \($0)" } ?? "")
            }
        }
    }

    struct Finish: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Finish a transaction (a consumable then leaves the receipt).")
        @OptionGroup var common: Common
        @Argument(help: "Transaction id.") var transactionId: String
        func run() async throws {
            try await SimCommand.run(SimFinishTransaction.self, .init(appleId: common.appleId, transactionId: transactionId), common) { _ in
                "finished \(transactionId)"
            }
        }
    }

    struct Restore: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Restore purchases (new transactions for the same originals).")
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(
                SimRestore.self,
                .init(
                    appleId: common.appleId, bundleId: common.bundleId,
                    receipt: common.receiptOptions), common
            ) {
                "restored \($0.signedTransactions.count) transaction(s) (\(common.simEnvironment.appleName))"
            }
        }
    }

    struct Refund: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Refund a transaction (sets its cancellation date).")
        @OptionGroup var common: Common
        @Argument(help: "Transaction id.") var transactionId: String
        @Option(
            name: .customLong("revocation-percentage"),
            help: "A prorated refund: the share refunded in milliunits, 1-99999 (33333 is a third; default: the whole).")
        var revocationPercentage: Int?
        func run() async throws {
            try await SimCommand.run(
                SimRefund.self, .init(appleId: common.appleId, transactionId: transactionId, revocationPercentage: revocationPercentage), common
            ) { _ in
                revocationPercentage.map { "refunded \(Double($0) / 1000)% of \(transactionId)" } ?? "refunded \(transactionId)"
            }
        }
    }

    struct AdvanceClock: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "advance-clock",
            abstract: "Move the simulated clock; subscriptions renew as periods pass.")
        @OptionGroup var common: Common
        @Option(help: "Days to move forward.") var days: Int64 = 0
        @Option(help: "Seconds to move forward.") var seconds: Int64 = 0
        func run() async throws {
            try await SimCommand.run(SimAdvanceClock.self, .init(seconds: days * 86_400 + seconds), common) {
                "now \($0.nowMs); \($0.renewals) renewal(s)"
            }
        }
    }

    struct Receipt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Print the current app receipt (base64).")
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(
                SimReceipt.self,
                .init(
                    appleId: common.appleId, bundleId: common.bundleId,
                    receipt: common.receiptOptions), common
            ) { $0.receiptData }
        }
    }

    struct Fault: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Make the HTTP verifyReceipt endpoints fail: none, status21005, http503 or slow.")
        @OptionGroup var common: Common
        @Argument(help: "none, status21005, http503 or slow.") var mode: String
        @Option(help: "Requests affected (default: until changed).") var count: Int?
        @Option(name: .customLong("delay-ms"), help: "Delay for slow.") var delayMs: Int?
        func run() async throws {
            guard let faultMode = SimFaultMode(rawValue: mode) else {
                throw ValidationError("mode must be none, status21005, http503 or slow")
            }
            try await SimCommand.run(SimSetFault.self, .init(mode: faultMode, count: count, delayMs: delayMs), common) { _ in
                "verifyReceipt endpoints: \(mode)"
            }
        }
    }

    struct TrustAnchor: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "trust-anchor",
            abstract: "Print the simulator's roots (base64 DER): receipts, then JWS.")
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(SimTrustAnchor.self, EmptyParams(), common) { "receiptRoot \($0.receiptRoot)\njwsRoot \($0.jwsRoot)" }
        }
    }
}

extension SimCommand {
    struct APIKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "api-key",
            abstract: "The App Store Server API key the simulator's /inApps endpoints accept (key id, issuer id; the PEM with --output).")
        @OptionGroup var common: Common
        @Option(help: "Write the private key (PEM) to this file, mode 0600.") var output: String?
        func run() async throws {
            try await SimCommand.run(SimAPIKey.self, EmptyParams(), common) { key in
                var lines = ["keyId \(key.keyId)", "issuerId \(key.issuerId)"]
                if let output {
                    if writePrivateFile(Array(key.privateKey.utf8), to: output) {
                        lines.append("private key written to \(output)")
                    } else {
                        lines.append("cannot write \(output)")
                    }
                } else {
                    lines.append("private key: --output FILE writes it (or --json prints it)")
                }
                return lines.joined(separator: "\n")
            }
        }
    }
}

extension SimCommand {
    struct NotificationURL: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "notification-url",
            abstract: "Where the simulator POSTs this environment's App Store Server Notifications (no URL: stop sending).")
        @Argument(help: "e.g. https://localhost:8443/v1/notifications/appstore") var url: String?
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(SimSetNotificationURL.self, .init(environment: common.simEnvironment, url: url), common) { _ in
                url.map { "\(common.environment) notifications go to \($0)" } ?? "\(common.environment) notifications are not sent"
            }
        }
    }

    struct Deliver: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Send the notifications due now (retries included) and wait for the answers.")
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(SimDeliverNotifications.self, EmptyParams(), common) {
                "\($0.attempted) sent, \($0.succeeded) answered 2xx, \($0.pendingRetries) waiting for a retry"
            }
        }
    }

    struct AutoRenew: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "auto-renew", abstract: "Turn a subscription's auto-renew off or on, as the customer would (DID_CHANGE_RENEWAL_STATUS).")
        @Argument(help: "Any transaction id of the subscription.") var transactionId: String
        @Argument(help: "on or off.") var state: String
        @OptionGroup var common: Common
        func validate() throws {
            guard ["on", "off"].contains(state) else { throw ValidationError("state must be on or off") }
        }
        func run() async throws {
            try await SimCommand.run(
                SimSetAutoRenew.self, .init(appleId: common.appleId, transactionId: transactionId, enabled: state == "on"), common
            ) { $0.signedPayload == nil ? "auto-renew was already \(state)" : "auto-renew \(state); DID_CHANGE_RENEWAL_STATUS sent" }
        }
    }
}

extension SimCommand {
    struct Consumption: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "What Send Consumption Information delivered for a transaction.")
        @Argument(help: "Transaction id.") var transactionId: String
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(SimConsumptionReports.self, .init(transactionId: transactionId), common) {
                $0.reports.isEmpty
                    ? "none" : $0.reports.map { String(decoding: (try? JSONByteEncoder.encode($0)) ?? [], as: UTF8.self) }.joined(separator: "\n")
            }
        }
    }
}

extension SimCommand {
    struct ServerFinishes: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "server-finishes", abstract: "The App Store Server API's Finish Transaction calls a transaction received.")
        @Argument(help: "Transaction id.") var transactionId: String
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(SimServerFinishes.self, .init(transactionId: transactionId), common) {
                $0.finishedAtMs.isEmpty ? "not finished by a server" : $0.finishedAtMs.map { "finished at \(isoTime($0))" }.joined(separator: "\n")
            }
        }
    }
}

extension SimCommand {
    struct NotificationFault: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "notification-fault", abstract: "Drop, duplicate, delay or reorder notification deliveries (no options: deliver faithfully)."
        )
        @Option(help: "Percent of deliveries dropped (0-100).") var drop: Int?
        @Option(help: "Percent of deliveries sent twice (0-100).") var duplicate: Int?
        @Option(name: .customLong("delay-ms"), help: "Milliseconds before each send (0-10000).") var delayMs: Int?
        @Flag(help: "Send the due notifications in random order.") var reorder = false
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(
                SimSetNotificationFault.self, .init(dropPercent: drop, duplicatePercent: duplicate, delayMs: delayMs, reorder: reorder), common
            ) { _ in "notification faults set" }
        }
    }

    struct Billing: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "fail: the subscription's next renewal charge fails (DID_FAIL_TO_RENEW at the period's end); recover: it succeeds (DID_RENEW/BILLING_RECOVERY)."
        )
        @Argument(help: "Any transaction id of the subscription.") var transactionId: String
        @Argument(help: "fail or recover.") var event: String
        @Option(name: .customLong("grace-days"), help: "fail: days of billing grace (0-16).") var graceDays: Int?
        @OptionGroup var common: Common
        func validate() throws {
            guard SimBillingEvent(rawValue: event) != nil else { throw ValidationError("event must be fail or recover") }
        }
        func run() async throws {
            try await SimCommand.run(
                SimBilling.self,
                .init(appleId: common.appleId, transactionId: transactionId, event: SimBillingEvent(rawValue: event)!, gracePeriodDays: graceDays),
                common
            ) { $0.signedPayload == nil ? "\(event): noted" : "\(event): notification sent" }
        }
    }

    struct RefundDecision: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "refund-decision",
            abstract: "request (CONSUMPTION_REQUEST), decline (REFUND_DECLINED) or reverse (REFUND_REVERSED) a refund.")
        @Argument(help: "Transaction id.") var transactionId: String
        @Argument(help: "request, decline or reverse.") var event: String
        @OptionGroup var common: Common
        func validate() throws {
            guard SimRefundEvent(rawValue: event) != nil else { throw ValidationError("event must be request, decline or reverse") }
        }
        func run() async throws {
            try await SimCommand.run(
                SimRefundDecision.self, .init(appleId: common.appleId, transactionId: transactionId, event: SimRefundEvent(rawValue: event)!), common
            ) { _ in "\(event): notification sent" }
        }
    }
}

extension SimCommand {
    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "revoke",
            abstract: "Revoke one of the simulator's signing certificates: its OCSP responder answers revoked from then on.")
        @OptionGroup var common: Common
        @Argument(help: "jws-leaf, jws-intermediate, receipt-leaf or receipt-intermediate.") var certificate: String
        func run() async throws {
            try await SimCommand.run(SimRevokeCertificate.self, .init(certificate: certificate), common) { revoked in
                "revoked \(certificate) serial \(revoked.serialNumber)"
                    + (revoked.ocspURL.map { " (responder \($0))" }
                        ?? " (its certificates name no responder: verifiers never ask; a new data directory gets one)")
            }
        }
    }

    struct OfferKey: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "offer-key",
            abstract: "The subscription-offer key the simulated App Store checks offers with (fulfillment-service --offer-key takes the PEM).")
        @OptionGroup var common: Common
        @Option(help: "Write the private key (PEM) to this file, mode 0600.") var output: String?
        func run() async throws {
            try await SimCommand.run(SimOfferKey.self, EmptyParams(), common) { key in
                var lines = ["keyId \(key.keyId)", "issuerId \(key.issuerId)"]
                if let output {
                    let written = writePrivateFile(Array(key.privateKey.utf8), to: output)
                    lines.append(written ? "private key written to \(output)" : "cannot write \(output)")
                }
                return lines.joined(separator: "\n")
            }
        }
    }

    struct LifecycleEvent: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "event",
            abstract:
                "priceIncrease, acceptPriceIncrease, upgrade PLAN, downgrade PLAN, cancelDowngrade, withdrawProduct, endOtherwise or revokeFamilySharing."
        )
        @Argument(help: "Any transaction id of the purchase.") var transactionId: String
        @Argument(help: "The event (see above).") var event: String
        @Argument(help: "upgrade and downgrade: the plan's product id.") var productId: String?
        @Option(name: .customLong("period-days"), help: "upgrade: the new plan's period in days (default: its product's, else 30).")
        var periodDays: Int?
        @OptionGroup var common: Common
        func validate() throws {
            guard SimLifecycleEventKind(rawValue: event) != nil else {
                throw ValidationError("event must be one of \(SimLifecycleEventKind.allCases.map(\.rawValue).joined(separator: ", "))")
            }
        }
        func run() async throws {
            try await SimCommand.run(
                SimLifecycleEvent.self,
                .init(
                    appleId: common.appleId, transactionId: transactionId, event: SimLifecycleEventKind(rawValue: event)!, productId: productId,
                    subscriptionPeriodDays: periodDays),
                common
            ) { $0.signedPayload == nil ? "\(event): noted (its notification comes at the period's end)" : "\(event): notification sent" }
        }
    }

    struct ShareFamily: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "share-family",
            abstract: "Share a non-consumable with a family member: a FAMILY_SHARED transaction of their own (revoke it with event).")
        @Argument(help: "The purchaser's transaction id (--apple-id is the purchaser).") var transactionId: String
        @Argument(help: "The family member's Apple ID.") var memberAppleId: String
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(
                SimShareWithFamily.self, .init(appleId: common.appleId, transactionId: transactionId, memberAppleId: memberAppleId), common
            ) { "shared with \(memberAppleId): transaction \($0.transactionId)\n\($0.signedTransaction)" }
        }
    }

    struct Notify: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Send a documented notification that changes nothing here (OFFER_REDEEMED, RENEWAL_EXTENSION, EXTERNAL_PURCHASE_TOKEN...).")
        @Argument(help: "The transaction it is about.") var transactionId: String
        @Argument(help: "notificationType, e.g. OFFER_REDEEMED.") var notificationType: String
        @Argument(help: "subtype, e.g. UPGRADE.") var subtype: String?
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(
                SimNotify.self,
                .init(appleId: common.appleId, transactionId: transactionId, notificationType: notificationType, subtype: subtype), common
            ) { _ in "\(notificationType): notification sent" }
        }
    }
}

/// The bundle id the local stack was started with: the first of `IAP_BUNDLE_IDS`, else the demo's.
func defaultBundleId() -> String {
    ProcessInfo.processInfo.environment["IAP_BUNDLE_IDS"]?.split(separator: ",").first
        .map { $0.trimmingCharacters(in: .whitespaces) }.flatMap { $0.isEmpty ? nil : $0 } ?? "com.example.game"
}

// `--environment` takes exactly production or sandbox; ArgumentParser refuses any other spelling, listing both.
extension SimEnvironment: ExpressibleByArgument {}
