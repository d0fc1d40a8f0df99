import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import ServiceSupport

/// `iap verify transaction|notification`: ask the running verification service about a StoreKit 2
/// signed transaction or an App Store Server Notification (receipts: `iap receipt verify`).
struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify", abstract: "Ask the verification service about a signed transaction or notification.",
        discussion: "Exit code 1 when it is refused. Receipts: iap receipt verify FILE.",
        subcommands: [
            Transaction.self, Notification.self, AppTransaction.self, RealtimeRequest.self, PlayPurchase.self, PlayAcknowledge.self, PlayPush.self,
        ])

    struct Transaction: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "verification.verifyTransaction: a StoreKit 2 JWS (text, file or -).")
        @Argument(help: "The JWS, a file holding it, or - for standard input.") var jws: String
        @Option(name: .customLong("bundle-id"), help: "Expected bundle id (narrows the service's own).") var bundleId: String?
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let answer = await ServiceCall(options: client).run(
                .verification, VerificationVerifyTransaction.self,
                .init(signedTransaction: try textArgument(jws), expectedBundleId: bundleId)
            ) {
                $0.status == 0
                    ? "VALID    environment \($0.environment ?? "?")  transaction \($0.transaction?["transactionId"]?.stringValue ?? "?")"
                    : "REFUSED  status \($0.status) (\($0.reason ?? "unknown"))"
            }
            if answer.status != 0 { throw ExitCodes.refused }
        }
    }

    struct Notification: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "verification.verifyNotification: an App Store Server Notification's signedPayload (text, file or -).")
        @Argument(help: "The signedPayload, a file holding it, or - for standard input.") var payload: String
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let answer = await ServiceCall(options: client).run(
                .verification, VerificationVerifyNotification.self,
                .init(signedPayload: try textArgument(payload))
            ) {
                $0.status == 0
                    ? "VALID    \($0.notification?["notificationType"]?.stringValue ?? "?") \($0.notification?["subtype"]?.stringValue ?? "")"
                    : "REFUSED  status \($0.status) (\($0.reason ?? "unknown"))"
            }
            if answer.status != 0 { throw ExitCodes.refused }
        }
    }
}

/// `iap apply-notification`: hand an App Store Server Notification to fulfillment, as Apple's webhook would.
struct ApplyNotificationCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apply-notification", abstract: "fulfillment.applyNotification: apply a signed notification (refunds, renewals).")
    @Argument(help: "The signedPayload, a file holding it, or - for standard input (e.g. from `iap sim refund ID --json`).")
    var payload: String
    @OptionGroup var client: ClientOptions
    @OptionGroup var token: InternalTokenOption
    func run() async throws {
        await ServiceCall(options: client).run(
            .fulfillment, FulfillmentApplyNotification.self,
            .init(signedPayload: try textArgument(payload), internalToken: try token.resolved())
        ) {
            $0.applied ? "applied" : "not applied (a type this server does not act on, or a purchase it cannot place)"
        }
    }
}

/// `iap revoke`: an administrator takes back one transaction's grant.
struct RevokeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke", abstract: "Admin: fulfillment.revokeTransaction (a reversal in the ledger; the entitlement removed).")
    @Argument(help: "Transaction id.") var transactionId: String
    @Option(help: "Why (kept with the revocation and in the ledger memo).") var reason: String
    @OptionGroup var admin: AdminTokenOption
    @OptionGroup var client: ClientOptions
    func run() async throws {
        let token = try admin.resolved()
        await ServiceCall(options: client).run(
            .fulfillment, FulfillmentRevokeTransaction.self,
            .init(adminToken: token, transactionId: transactionId, reason: reason)
        ) { _ in
            "revoked \(transactionId)"
        }
    }
}
