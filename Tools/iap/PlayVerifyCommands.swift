import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import RPCTransport

/// `iap verify play-purchase` / `play-acknowledge`: verification's Google Play methods (internal token).
extension VerifyCommand {
    struct PlayReference: ParsableArguments {
        @Argument(help: "The product (or subscription) id.") var productId: String
        @Argument(help: "The purchase token.") var purchaseToken: String
        @Option(name: .customLong("package"), help: "The package name (default: the one verification accepts).") var packageName: String?
        @Flag(help: "A subscription (default: a one-time product).") var subscription = false
        @OptionGroup var token: InternalTokenOption

        func reference() throws -> PlayPurchaseReference {
            .init(
                internalToken: try token.resolved(), packageName: packageName, productId: productId, purchaseToken: purchaseToken,
                kind: subscription ? .subscription : .product)
        }
    }

    struct PlayPurchase: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "play-purchase", abstract: "verification.verifyPlayPurchase: a Google Play purchase token, asked of Google.")
        @OptionGroup var purchase: PlayReference
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(.verification, VerificationVerifyPlayPurchase.self, try purchase.reference()) { p in
                "\(p.entitles ? "ENTITLES" : "DOES NOT ENTITLE") \(p.state) \(p.productId) order \(p.orderId ?? "-")"
                    + (p.acknowledged ? ", acknowledged" : ", not acknowledged") + (p.test ? ", license tester's" : "")
            }
        }
    }

    struct PlayAcknowledge: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "play-acknowledge", abstract: "verification.acknowledgePlayPurchase: acknowledge (or --consume) it at Google.")
        @OptionGroup var purchase: PlayReference
        @Flag(help: "Consume it (consumables), which also acknowledges.") var consume = false
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationAcknowledgePlayPurchase.self, .init(purchase: try purchase.reference(), consume: consume)
            ) { _ in consume ? "consumed" : "acknowledged" }
        }
    }
}

/// A Pub/Sub push as the edge's Google Play route receives it: its body and Authorization header.
struct PlayPushArguments: ParsableArguments {
    @Argument(help: "The push's JSON body, a file holding it, or - for standard input.") var body: String
    @Option(help: "The push's Authorization header (\"Bearer <OIDC token>\").") var authorization: String
}

extension VerifyCommand {
    struct PlayPush: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "play-push", abstract: "verification.verifyPlayPush: check a Google Play notification's push (its OIDC token) and read it.")
        @OptionGroup var push: PlayPushArguments
        @OptionGroup var token: InternalTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let params = PlayPushDelivery(internalToken: try token.resolved(), authorization: push.authorization, body: try textArgument(push.body))
            await ServiceCall(options: client).run(.verification, VerificationVerifyPlayPush.self, params) { p in
                "message \(p.messageId): \(p.kind.rawValue)\(p.notificationType.map { " \($0)" } ?? "") of \(p.packageName)"
                    + (p.purchaseToken.map { ", purchase token \($0)" } ?? "")
            }
        }
    }
}

extension VerifyCommand {
    struct PlayVoided: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "play-voided", abstract: "verification.playVoidedPurchases: Google Play purchases voided since a time (one page).")
        @Option(help: "Since this many hours ago (Google keeps 30 days).") var hours: Int64 = 24
        @Option(help: "The previous page's next page token.") var page: String?
        @OptionGroup var token: InternalTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let since = Int64(Date().timeIntervalSince1970 * 1000) - hours * 3_600_000
            await ServiceCall(options: client).run(
                .verification, VerificationPlayVoidedPurchases.self, .init(internalToken: try token.resolved(), startTimeMs: since, pageToken: page)
            ) { r in
                (r.voidedPurchases.map { "\($0.packageName) order \($0.orderId ?? "-") token \($0.purchaseToken)" } + [
                    r.nextPageToken.map { "more: --page \($0)" } ?? "\(r.voidedPurchases.count) voided"
                ]).joined(separator: "\n")
            }
        }
    }
}

/// `iap receive-play-notification`: what the edge's Google Play route does with a push.
struct ReceivePlayNotificationCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receive-play-notification",
        abstract: "fulfillment.receivePlayNotification: verify a Google Play push, record it in the inbox, process it.")
    @OptionGroup var push: PlayPushArguments
    @OptionGroup var client: ClientOptions
    @OptionGroup var token: InternalTokenOption
    func run() async throws {
        let params = PlayPushDelivery(internalToken: try token.resolved(), authorization: push.authorization, body: try textArgument(push.body))
        await ServiceCall(options: client).run(.fulfillment, FulfillmentReceivePlayNotification.self, params) {
            "\($0.notificationUUID): \($0.state.rawValue)\($0.firstDelivery ? "" : " (delivered before; nothing done again)")"
        }
    }
}
