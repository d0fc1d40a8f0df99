import ArgumentParser
import Foundation
import IAPProtocol

// `iap sim realtime-url` and `iap sim cancel-intent`: the simulated App Store's side of Retention Messaging.
extension SimCommand {
    struct RealtimeURL: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "realtime-url",
            abstract: "Where the simulator sends this environment's realtime retention requests (no URL: the default message is shown).")
        @Argument(help: "e.g. https://localhost:8443/v1/retention/appstore") var url: String?
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(SimSetRealtimeURL.self, .init(environment: common.simEnvironment, url: url), common) { _ in
                url.map { "\(common.environment) realtime retention requests go to \($0)" } ?? "\(common.environment): no realtime URL"
            }
        }
    }

    struct CancelIntent: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "cancel-intent",
            abstract: "A customer looks at cancelling a subscription: the app's server is asked which retention message to show.")
        @Argument(help: "The subscription's original transaction id.") var originalTransactionId: String
        @Option(help: "The device's locale.") var locale = "en-US"
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(
                SimCancelIntent.self, .init(appleId: common.appleId, originalTransactionId: originalTransactionId, locale: locale), common
            ) {
                let s = $0.shown
                return "request \($0.requestIdentifier): shown \(s.kind)"
                    + [
                        s.messageIdentifier.map { " message \($0)" }, s.productId.map { " product \($0)" }, s.offerIdentifier.map { " offer \($0)" },
                        s.reason.map { " (\($0))" },
                    ].compactMap { $0 }.joined()
            }
        }
    }

    struct Review: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Apple's review of an uploaded retention message or image: APPROVED, REJECTED or PENDING (sim.reviewMessaging).")
        @Argument(help: "The message's or image's identifier.") var identifier: String
        @Argument(help: "APPROVED, REJECTED or PENDING.") var state = "APPROVED"
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(SimReviewMessaging.self, .init(identifier: identifier, state: state), common) {
                "\(identifier): \(state) (\($0.reviewed) reviewed)"
            }
        }
    }
}
