import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC

/// `iap accounts register|login|logout|whoami|sessions`. Signing in saves the session in the config file.
struct AccountsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "accounts", abstract: "Register, sign in and out, and see who you are.",
        subcommands: [
            Register.self, Login.self, Logout.self, WhoAmI.self, Sessions.self, ChangePassword.self, Find.self, FindUser.self, Consent.self,
            ConsumptionProfile.self, LinkAppTransaction.self, AppleCustomer.self, Get.self, RevokeSessions.self,
        ])

    struct ChangePassword: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "change-password", abstract: "Change your password; every other session is signed out.")
        @Option(name: .customLong("current-password"), help: "Current password (default: IAP_PASSWORD, else asked for).")
        var currentPassword: String?
        @Option(name: .customLong("new-password"), help: "New password (default: IAP_NEW_PASSWORD, else asked for).")
        var newPassword: String?
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let session = try client.requireSession()
            let current = try readSecret(currentPassword, env: "IAP_PASSWORD", prompt: "current password: ")
            let new = try readSecret(newPassword, env: "IAP_NEW_PASSWORD", prompt: "new password: ")
            await ServiceCall(options: client).run(
                .accounts, AccountsChangePassword.self,
                .init(session: session, currentPassword: current, newPassword: new)
            ) { _ in
                "password changed; every other session was signed out"
            }
        }
    }

    struct Find: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Internal: the account an appAccountToken belongs to (accounts.findByAppAccountToken).")
        @Argument(help: "The appAccountToken (UUID).") var appAccountToken: String
        @OptionGroup var internalToken: InternalTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try internalToken.resolved()
            await ServiceCall(options: client).run(
                .accounts, AccountsFindByAppAccountToken.self,
                .init(appAccountToken: appAccountToken, internalToken: token)
            ) { "account \($0.accountId)" }
        }
    }

    struct FindUser: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "find-user", abstract: "Internal: an account id and appAccountToken by username (accounts.findByUsername).")
        @Argument(help: "Username.") var username: String
        @OptionGroup var internalToken: InternalTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try internalToken.resolved()
            await ServiceCall(options: client).run(.accounts, AccountsFindByUsername.self, .init(username: username, internalToken: token)) {
                "account \($0.accountId) appAccountToken \($0.appAccountToken)"
            }
        }
    }

    struct Consent: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "on: allow sending consumption data to Apple when you ask Apple for a refund (accounts.setConsumptionConsent); off: stop.")
        @Argument(help: "on or off.") var state: String
        @OptionGroup var client: ClientOptions
        func validate() throws {
            guard ["on", "off"].contains(state) else { throw ValidationError("state must be on or off") }
        }
        func run() async throws {
            await ServiceCall(options: client).run(
                .accounts, AccountsSetConsumptionConsent.self, .init(session: try client.requireSession(), consent: state == "on")
            ) { $0.consent ? "consumption data may be sent to Apple on a refund request" : "consumption data is not sent" }
        }
    }

    struct ConsumptionProfile: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "consumption-profile", abstract: "Internal: an account's consent, age and appAccountToken (accounts.consumptionProfile).")
        @Argument(help: "Account id.") var accountId: String
        @OptionGroup var internalToken: InternalTokenOption
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let token = try internalToken.resolved()
            await ServiceCall(options: client).run(.accounts, AccountsConsumptionProfile.self, .init(accountId: accountId, internalToken: token)) {
                "consent \($0.consent ? "on" : "off"), created \(isoTime($0.createdAtMs)), appAccountToken \($0.appAccountToken)"
            }
        }
    }

    struct SignInOptions: ParsableArguments {
        @Argument(help: "Username.") var username: String
        @Option(help: "Password (default: IAP_PASSWORD, else asked for).") var password: String?
        @Option(name: .customLong("device-name"), help: "A name for this device in `iap accounts sessions`.") var deviceName = "iap CLI"
    }

    static func signIn<M: RPCMethod>(_ method: M.Type, _ options: SignInOptions, client: ClientOptions, verb: String) async throws
    where M.Params == Credentials, M.Result == SignedIn {
        let password = try readSecret(options.password, env: "IAP_PASSWORD", prompt: "password for \(options.username): ")
        let call = ServiceCall(options: client)
        let (signed, raw) = await call.call(
            .accounts, method,
            Credentials(
                username: options.username, password: password,
                deviceName: options.deviceName))
        var config = CLIConfig.load()
        config.session = signed.session.token
        config.username = options.username
        config.accountId = signed.accountId
        try config.save()
        print(
            client.json
                ? String(decoding: raw, as: UTF8.self)
                : "\(verb) as \(options.username) (account \(signed.accountId)); session saved in \(CLIConfig.path.path)")
    }

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create an account and sign in.")
        @OptionGroup var account: SignInOptions
        @OptionGroup var client: ClientOptions
        func run() async throws { try await signIn(AccountsRegister.self, account, client: client, verb: "registered and signed in") }
    }

    struct Login: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Sign in; the session is saved for the other commands.")
        @OptionGroup var account: SignInOptions
        @OptionGroup var client: ClientOptions
        func run() async throws { try await signIn(AccountsLogin.self, account, client: client, verb: "signed in") }
    }

    struct Logout: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke the session and forget it.")
        @OptionGroup var client: ClientOptions
        func run() async throws {
            let session = try client.requireSession()
            await ServiceCall(options: client).run(.accounts, AccountsLogout.self, .init(session: session)) { _ in "signed out" }
            var config = CLIConfig.load()
            if config.session == session {
                config.session = nil
                try config.save()
            }
        }
    }

    struct WhoAmI: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "whoami", abstract: "Who the saved session belongs to.")
        @OptionGroup var client: ClientOptions
        @OptionGroup var token: InternalTokenOption
        func run() async throws {
            await ServiceCall(options: client).run(
                .accounts, AccountsAuthenticate.self, .init(session: try client.requireSession(), internalToken: try token.resolved())
            ) {
                "\($0.username) (account \($0.accountId), appAccountToken \($0.appAccountToken)); session valid until \(isoTime($0.expiresAtMs))"
            }
        }
    }

    struct Sessions: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "The account's signed-in devices.")
        @OptionGroup var client: ClientOptions
        func run() async throws {
            await ServiceCall(options: client).run(.accounts, AccountsListSessions.self, .init(session: try client.requireSession())) {
                table(
                    ["device", "signed in", "last seen", ""],
                    $0.sessions.map {
                        [$0.deviceName ?? "-", isoTime($0.createdAtMs), isoTime($0.lastSeenAtMs), $0.current ? "(this one)" : ""]
                    })
            }
        }
    }
}
