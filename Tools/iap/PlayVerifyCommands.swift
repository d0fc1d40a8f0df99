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
