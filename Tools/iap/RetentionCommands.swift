import ArgumentParser
import Foundation
import IAPProtocol

/// `iap retention ...`: the catalog's retention rules (what a customer about to cancel is shown) and fulfillment's answer to
/// one of Apple's Get Retention Message requests.
struct RetentionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retention", abstract: "Retention Messaging: the rules that choose what a customer about to cancel is shown.",
        subcommands: [Set.self, Show.self, Answer.self])

    struct Set: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Admin: replace a subscription's retention rules from a JSON file ({choices: [...], defaultMessageIdentifier}) (catalog.setRetention)."
        )
        @Argument(help: "Product id (an auto-renewable).") var productId: String
        @Argument(help: "The rules as JSON: a file, - for standard input, or the text itself.") var rules: String?
        @Flag(help: "Remove the product's rules.") var clear = false
        @OptionGroup var admin: CatalogCommand.Admin
        @OptionGroup var client: ClientOptions

        func validate() throws {
            guard (rules == nil) == clear else { throw ValidationError("give the rules (a file, - or JSON) or --clear, not both") }
        }

        func run() async throws {
            var parsed: RetentionRules?
            if let rules {
                do {
                    parsed = try JSONDecoder().decode(RetentionRules.self, from: Data(try textArgument(rules).utf8))
                } catch let error as DecodingError {
                    throw ValidationError("the rules are not {choices: [...], defaultMessageIdentifier?}: \(error)")
                }
            }
            await ServiceCall(options: client).run(
                .catalog, CatalogSetRetention.self, .init(adminToken: try admin.token(), productId: productId, retention: parsed)
            ) { _ in parsed.map { "\(productId): \($0.choices.count) retention rule(s) saved" } ?? "\(productId): retention rules removed" }
        }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "A subscription's retention rules, offers and group (catalog.getRetention).")
        @Argument(help: "Product id.") var productId: String
        @OptionGroup var client: ClientOptions
        @OptionGroup var token: InternalTokenOption
        func run() async throws {
            await ServiceCall(options: client).run(
                .catalog, CatalogGetRetention.self, .init(internalToken: try token.resolved(), productId: productId)
            ) { r in
                let lines = (r.retention?.choices ?? []).map { c in
                    "  \(c.id): \(c.kind.rawValue) \(c.messageIdentifier)"
                        + [
                            c.offerId.map { " offer \($0)" }, c.alternateProductId.map { " product \($0)" },
                            c.locales.map { " locales \($0.joined(separator: ","))" },
                        ]
                        .compactMap { $0 }.joined()
                }
                let fallback = r.retention?.defaultMessageIdentifier.map { "  default: message \($0)" }
                return (["\(r.productId) (group \(r.subscriptionGroup)): \(lines.count) rule(s)"] + lines + [fallback].compactMap { $0 })
                    .joined(separator: "\n")
            }
        }
    }

    struct Answer: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "fulfillment.retentionMessage: answer a signed RealtimeRequestBody as the edge's endpoint would (e.g. from `iap sim cancel-intent --json`)."
        )
        @Argument(help: "The signedPayload, a file holding it, or - for standard input.") var payload: String
        @OptionGroup var client: ClientOptions
        @OptionGroup var token: InternalTokenOption
        func run() async throws {
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentRetentionMessage.self, .init(signedPayload: try textArgument(payload), internalToken: try token.resolved())
            ) { r in
                let response = r.response
                let shown =
                    response.message.map { "message \($0.messageIdentifier)" }
                    ?? response.alternateProduct.map { "alternate product \($0.productId) (message \($0.messageIdentifier))" }
                    ?? response.promotionalOffer.map { "promotional offer (message \($0.messageIdentifier))" } ?? "nothing (Apple's default message)"
                return "request \(r.requestIdentifier): \(shown)" + (r.choiceId.map { ", rule \($0)" } ?? "") + (r.reason.map { " (\($0))" } ?? "")
            }
        }
    }
}

extension VerifyCommand {
    struct RealtimeRequest: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "realtime-request",
            abstract: "verification.verifyRealtimeRequest: a Retention Messaging RealtimeRequestBody's signedPayload (text, file or -).")
        @Argument(help: "The signedPayload, a file holding it, or - for standard input.") var payload: String
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let answer = await ServiceCall(options: client).run(
                .verification, VerificationVerifyRealtimeRequest.self, .init(signedPayload: try textArgument(payload))
            ) { r in
                guard r.status == 0, let q = r.request else { return "REFUSED  status \(r.status) (\(r.reason ?? "unknown"))" }
                return
                    "VALID    \(q.environment) \(q.productId) original \(q.originalTransactionId) locale \(q.userLocale) request \(q.requestIdentifier)"
            }
            if answer.status != 0 { throw ExitCodes.refused }
        }
    }
}
