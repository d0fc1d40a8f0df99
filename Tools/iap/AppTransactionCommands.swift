import ArgumentParser
import Foundation
import IAPProtocol

// The app transaction in the CLI: the simulator's (`iap sim app-transaction`), verified (`iap verify app-transaction`),
// fetched from Apple (`iap appstore app-transaction`), linked to the signed-in account (`iap accounts link-app-transaction`),
// and the accounts of an Apple customer (`iap accounts apple-customer`, `iap support customer`).

extension SimCommand {
    struct AppTransaction: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "app-transaction", abstract: "The Apple ID's signed AppTransaction for the app (StoreKit's AppTransaction.shared).")
        @OptionGroup var common: Common
        func run() async throws {
            try await SimCommand.run(
                SimAppTransaction.self, .init(appleId: common.appleId, bundleId: common.bundleId, environment: common.environment), common
            ) { "appTransactionId \($0.appTransactionId)\n\($0.signedAppTransaction)" }
        }
    }
}

extension VerifyCommand {
    struct AppTransaction: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "app-transaction", abstract: "verification.verifyAppTransaction: StoreKit's signed AppTransaction (text, file or -).")
        @Argument(help: "The JWS, a file holding it, or - for standard input.") var jws: String
        @Option(name: .customLong("bundle-id"), help: "Expected bundle id (narrows the service's own).") var bundleId: String?
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let answer = await ServiceCall(options: client).run(
                .verification, VerificationVerifyAppTransaction.self,
                .init(signedAppTransaction: try textArgument(jws), expectedBundleId: bundleId)
            ) { describe($0) }
            if answer.status != 0 { throw ExitCodes.refused }
        }
    }

    static func describe(_ answer: VerificationVerifyAppTransaction.Result) -> String {
        guard answer.status == 0, let app = answer.appTransaction.flatMap(AppleAppTransaction.init) else {
            return "REFUSED  status \(answer.status) (\(answer.reason ?? "unknown"))"
        }
        return "VALID    environment \(answer.environment ?? "?")  appTransactionId \(app.appTransactionId)  platform \(app.originalPlatform ?? "?")"
            + "  first version \(app.originalApplicationVersion ?? "?")" + (app.preorderDateMs.map { "  pre-ordered \(isoTime($0))" } ?? "")
    }
}

extension AppStoreCommand {
    struct AppTransaction: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "app-transaction",
            abstract: "verification.appTransactionInfo: a customer's app transaction from Apple, by any of their transaction ids.")
        @Argument(help: "A transaction id, original transaction id or appTransactionId of the customer.") var transactionId: String
        @OptionGroup var token: Token
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .verification, VerificationAppTransactionInfo.self, .init(internalToken: try token.resolved(), transactionId: transactionId)
            ) { VerifyCommand.describe($0) }
        }
    }
}

extension AccountsCommand {
    struct LinkAppTransaction: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "link-app-transaction",
            abstract: "accounts.linkAppTransaction: link your account to the Apple customer of a signed AppTransaction (text, file or -).")
        @Argument(help: "The JWS, a file holding it, or - for standard input.") var jws: String
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(
                .accounts, AccountsLinkAppTransaction.self, .init(session: try client.requireSession(), signedAppTransaction: try textArgument(jws))
            ) { "linked to the Apple customer of app transaction \($0.appTransactionId)" }
        }
    }

    struct AppleCustomer: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "apple-customer",
            abstract: "Internal: accounts.appleCustomer: an account's Apple customers and their accounts, or one customer's accounts.")
        @Option(name: .customLong("account-id")) var accountId: String?
        @Option(name: .customLong("app-transaction-id")) var appTransactionId: String?
        @OptionGroup var internalToken: InternalTokenOption
        @OptionGroup var client: ClientOptions
        func validate() throws {
            guard (accountId == nil) != (appTransactionId == nil) else { throw ValidationError("give --account-id or --app-transaction-id") }
        }
        func run() async throws {
            await ServiceCall(options: client).run(
                .accounts, AccountsAppleCustomer.self,
                .init(internalToken: try internalToken.resolved(), accountId: accountId, appTransactionId: appTransactionId)
            ) { AccountsCommand.linksTable($0.links) }
        }
    }

    static func linksTable(_ links: [AppTransactionLink]) -> String {
        links.isEmpty
            ? "no account is linked to an Apple customer here"
            : table(
                ["app transaction", "environment", "account", "username", "linked"],
                links.map { [$0.appTransactionId, $0.environment, $0.accountId, $0.username, isoTime($0.linkedAtMs)] })
    }
}

extension SupportCommand {
    struct Customer: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "An Apple customer's accounts here: by appTransactionId, or by any of their transaction ids (asked at Apple).")
        @Option(name: .customLong("app-transaction-id")) var appTransactionId: String?
        @Option(name: .customLong("transaction-id"), help: "Any transaction id of the customer (Get App Transaction Info at Apple).")
        var transactionId: String?
        @OptionGroup var internalToken: InternalTokenOption
        @OptionGroup var client: ClientOptions
        func validate() throws {
            guard (appTransactionId == nil) != (transactionId == nil) else {
                throw ValidationError("give --app-transaction-id or --transaction-id")
            }
        }
        func run() async throws {
            let token = try internalToken.resolved()
            let call = ServiceCall(options: client)
            var customer = appTransactionId ?? ""
            if let transactionId {
                let (answer, _) = await call.call(
                    .verification, VerificationAppTransactionInfo.self, .init(internalToken: token, transactionId: transactionId))
                guard let app = answer.appTransaction.flatMap(AppleAppTransaction.init), answer.status == 0 else {
                    throw ValidationError("Apple's app transaction for \(transactionId) did not verify (status \(answer.status))")
                }
                print(VerifyCommand.describe(answer))
                customer = app.appTransactionId
            }
            await call.run(.accounts, AccountsAppleCustomer.self, .init(internalToken: token, appTransactionId: customer)) {
                AccountsCommand.linksTable($0.links)
            }
        }
    }
}
