import ArgumentParser
import Foundation
import IAPProtocol

// Mass renewal extensions in the CLI: `iap support extend --all` (AdminCommand.swift), its status
// (`iap support extend-status`), and Apple's two endpoints through verification (`iap appstore mass-extend[-status]`).

func describe(_ status: MassExtensionStatus) -> String {
    guard status.complete else { return "mass extension \(status.requestIdentifier): not complete yet at Apple" }
    return "mass extension \(status.requestIdentifier): complete \(status.completeDateMs.map(isoTime) ?? "?"), "
        + "\(status.succeededCount ?? 0) extended, \(status.failedCount ?? 0) failed"
}

extension SupportCommand {
    struct ExtendStatus: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "extend-status",
            abstract: "fulfillment.massExtensionStatus: a mass extension at Apple, and its summary as recorded here.")
        @Argument(help: "The request identifier `iap support extend --all` printed.") var requestIdentifier: String
        @Option(help: "The subscription product.") var product: String
        @OptionGroup var environment: AppStoreCommand.EnvironmentOption
        @OptionGroup var admin: AdminTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try admin.resolved()
            await ServiceCall(options: client).run(
                .fulfillment, FulfillmentMassExtensionStatus.self,
                .init(adminToken: token, productId: product, requestIdentifier: requestIdentifier, environment: environment.apple)
            ) { answer in
                describe(answer.atApple) + "\n"
                    + (answer.summary.map {
                        "recorded here \(answer.summaryRecordedAtMs.map(isoTime) ?? "?"): \($0.succeededCount) extended, \($0.failedCount) failed (\($0.productId), \($0.environment))"
                    } ?? "no summary from Apple recorded here yet")
            }
        }
    }
}

extension AppStoreCommand {
    struct MassExtend: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "mass-extend",
            abstract:
                "verification.massExtendRenewalDate: extend every active subscriber of a product at Apple (not audited: use iap support extend --all)."
        )
        @Option(help: "The subscription product.") var product: String
        @Option(help: "Days to add (1-90).") var days: Int
        @Option(name: .customLong("reason-code"), help: "Apple's code: 0 undeclared, 1 customer satisfaction, 2 other, 3 service issue.")
        var reasonCode = 1
        @Option(name: .customLong("request-id"), help: "A UUID; the same one again is the same request (default: a new one).")
        var requestId: String?
        @Option(help: "Only this storefront (ISO 3166-1 alpha-3); repeatable.") var storefront: [String] = []
        @OptionGroup var environment: AppStoreCommand.EnvironmentOption
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationMassExtendRenewalDate.self,
                .init(
                    internalToken: try token.resolved(), environment: environment.apple, productId: product, extendByDays: days,
                    extendReasonCode: reasonCode, requestIdentifier: requestId ?? UUID().uuidString.lowercased(),
                    storefrontCountryCodes: storefront.isEmpty ? nil : storefront)
            ) { "mass extension \($0.requestIdentifier) requested at Apple" }
        }
    }

    struct MassExtendStatus: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "mass-extend-status", abstract: "verification.massExtensionStatus: whether Apple has carried out a mass extension.")
        @Argument(help: "The request identifier.") var requestIdentifier: String
        @Option(help: "The subscription product.") var product: String
        @OptionGroup var environment: AppStoreCommand.EnvironmentOption
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationMassExtensionStatus.self,
                .init(internalToken: try token.resolved(), environment: environment.apple, productId: product, requestIdentifier: requestIdentifier)
            ) { describe($0) }
        }
    }
}
