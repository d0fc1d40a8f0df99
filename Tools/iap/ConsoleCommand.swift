import AccountsService
import ArgumentParser
import ConsoleService
import Foundation
import Logging
import PostgresSupport
import ServiceSupport

/// `iap console add-operator`: the support console's operators, written straight into its database (the console's own
/// records are not behind any service method, so the first operator can exist before anyone can sign in).
struct ConsoleCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "console", abstract: "The support console's operators.", subcommands: [AddOperator.self])

    struct AddOperator: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add-operator",
            abstract: "Create an operator with a random password and TOTP secret, printed once (for a first operator and for tests).")
        @Argument(help: "The operator's name: 1-64 letters, digits, '.', '_', '-' or '@'.") var name: String
        @Option(help: "viewer (read), support (read and act on customers) or admin (also operators and the catalog).") var role: String
        @Option(name: .customLong("data-dir"), help: "The console's data directory, where console.sqlite is (env IAP_DATA_DIR; default data).")
        var dataDir: String?
        @OptionGroup var database: DatabaseOptions
        @Flag(help: "Print {password, totpSecret} as JSON.") var json = false

        func validate() throws {
            guard OperatorRole(rawValue: role) != nil else { throw ValidationError("--role must be viewer, support or admin") }
            guard OperatorRecord.normalized(name) != nil else {
                throw ValidationError("operator names are 1-64 letters, digits, '.', '_', '-' or '@'")
            }
        }

        func run() async throws {
            let store: any ConsoleStorage
            if let url = database.resolvedURL() {
                let pool = try PostgresPool(url: try PostgresURL(url), schema: "console", connections: 1, logger: Logger(label: "iap"))
                store = try await PostgresConsoleStore(pool: pool)
            } else {
                let directory = URL(fileURLWithPath: dataDir ?? Environment.value("IAP_DATA_DIR") ?? "data", isDirectory: true)
                try PrivateFiles.directory(directory)
                store = try ConsoleStore.open(directory: directory)
            }
            defer { try? store.close() }
            let hasher = PasswordHasher(parameters: .default, concurrency: 1)
            let created: (password: String, totpSecret: String)
            do {
                created = try await ConsoleService.addOperator(
                    name, role: OperatorRole(rawValue: role)!, store: store, hasher: hasher, nowMs: ServiceClock.system.nowMs)
            } catch let error as OperatorExists {
                await hasher.shutdown()
                throw ValidationError(error.description)
            }
            await hasher.shutdown()
            if json {
                let body = try JSONSerialization.data(
                    withJSONObject: ["password": created.password, "totpSecret": created.totpSecret], options: [.sortedKeys])
                print(String(decoding: body, as: UTF8.self))
            } else {
                print(
                    """
                    operator \(name.lowercased()) (\(role)) created; shown once:
                      password     \(created.password)
                      TOTP secret  \(created.totpSecret)  (base32: type it into an authenticator app, 6 digits, 30 s)
                    """)
            }
        }
    }
}
