import ArgumentParser
import Foundation
import IAPProtocol
import JSONRPC
import RPCTransport
import ServiceSupport

/// The services `iap` talks to (`ServiceSupport.SuiteService`), named on the command line.
extension SuiteService: ExpressibleByArgument {
    /// The flag, else the environment variable, else the config file, else 127.0.0.1 and the default port (docs/contract.md).
    func address(flag: String?) -> String {
        address(flag: flag, configured: CLIConfig.load().addresses?[rawValue])
    }
}

/// The per-user config file: the session after `iap accounts login`, and optional addresses.
/// `$IAP_CONFIG`, else `$XDG_CONFIG_HOME/iap/config.json`, else `$HOME/.config/iap/config.json`; mode 0600.
struct CLIConfig: Codable {
    var session: String?
    var username: String?
    var accountId: String?
    var addresses: [String: String]?

    static var path: URL {
        if let explicit = Environment.value("IAP_CONFIG") { return URL(fileURLWithPath: explicit) }
        // HOME as the environment says (Foundation's home directory on Linux is the passwd entry's).
        let home = Environment.value("HOME").map { URL(fileURLWithPath: $0) } ?? FileManager.default.homeDirectoryForCurrentUser
        let base = Environment.value("XDG_CONFIG_HOME").map { URL(fileURLWithPath: $0) } ?? home.appendingPathComponent(".config")
        return base.appendingPathComponent("iap/config.json")
    }

    static func load() -> CLIConfig {
        guard let data = FileManager.default.contents(atPath: path.path),
            let config = try? JSONDecoder().decode(CLIConfig.self, from: data)
        else { return CLIConfig() }
        return config
    }

    /// Written to a temporary file opened 0600 and renamed over the old one (it holds the session token).
    func save() throws {
        let url = Self.path
        try FileManager.default.createDirectory(
            at: url.deletingLastPathComponent(), withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try PrivateFiles.writeSecret(Array(try encoder.encode(self)), to: url)
    }
}

/// Writes a secret (a private key, a session) to `path` as `PrivateFiles.writeSecret` does: opened 0600 from its first
/// byte, then renamed into place. Foundation's `createFile(attributes:)` sets the mode after writing, so the file was
/// readable under the umask's mode for a moment.
func writePrivateFile(_ bytes: [UInt8], to path: String) -> Bool {
    (try? PrivateFiles.writeSecret(bytes, to: URL(fileURLWithPath: path))) != nil
}

enum CLIError: Error, CustomStringConvertible {
    case message(String)
    var description: String { if case .message(let m) = self { return m } else { return "" } }
}

/// Options every service command takes: where the services are, which session, output format.
struct ClientOptions: ParsableArguments {
    @Option(
        help:
            "Service address HOST:PORT, or HOST:PORT,HOST:PORT for instances (default: IAP_<SERVICE>_ADDR, the config file, else 127.0.0.1 and the default port)."
    )
    var addr: String?
    @Option(help: "Session token (default: IAP_SESSION, else the one saved by `iap accounts login`).") var session: String?
    @Flag(help: "Print exactly the service's result as JSON.") var json = false
    @Option(
        help:
            "The suite's public URL, e.g. https://localhost:8443 (default: IAP_EDGE_URL): public methods and downloads go through the edge; admin and simulator commands still use the service addresses."
    )
    var edge: String?
    @Option(help: "PEM certificate authority the edge's certificate is checked against, besides the system's (default: IAP_EDGE_CA).")
    var ca: String?

    var edgeURL: String? { Environment.resolve(edge, env: "IAP_EDGE_URL") }
    var edgeCA: String? { Environment.resolve(ca, env: "IAP_EDGE_CA") }

    func address(_ service: SuiteService) -> String { service.address(flag: addr) }

    func requireSession() throws -> String {
        if let session { return session }
        if let env = Environment.value("IAP_SESSION") { return env }
        if let saved = CLIConfig.load().session { return saved }
        fail("not signed in: run `iap accounts login USERNAME` (or `iap accounts register USERNAME`) first", exit: ExitCodes.refused)
    }
}

enum ExitCodes {
    /// A service (or check) refused: an RPC error, an invalid receipt, a checksum mismatch.
    static let refused = ExitCode(1)
    /// A service could not be reached.
    static let unreachable = ExitCode(2)
    /// Bad command line (ArgumentParser's own code for validation errors).
    static let usage = ExitCode(64)
}

func printError(_ text: String) {
    FileHandle.standardError.write(Data((text.hasSuffix("\n") ? text : text + "\n").utf8))
}

/// TLS to the suite's services from IAP_TLS_CA (and IAP_TLS_CLIENT_CERT / IAP_TLS_CLIENT_KEY), as the services
/// take it; nil (plain TCP) without IAP_TLS_CA.
func internalTLS() -> RPCClientTLS? {
    do {
        return try InternalClientTLSOptions.clientTLS()
    } catch {
        fail("\(error)", exit: ExitCodes.usage)
    }
}

func fail(_ text: String, exit code: ExitCode) -> Never {
    printError(text)
    Foundation.exit(code.rawValue)
}

/// One RPC from the CLI: typed params in, typed result and the raw result bytes out. Failures print what
/// happened and what to do, and exit 1 (the service refused) or 2 (unreachable).
struct ServiceCall {
    /// `--addr` (applies to the command's one service) and `--json`.
    let addr: String?
    let json: Bool
    /// `--edge` / IAP_EDGE_URL and `--ca` / IAP_EDGE_CA: public methods go through the edge.
    let edge: String?
    let ca: String?

    init(options: ClientOptions) {
        addr = options.addr
        json = options.json
        edge = options.edgeURL
        ca = options.edgeCA
    }

    init(addr: String? = nil, json: Bool = false) {
        self.addr = addr
        self.json = json
        self.edge = Environment.value("IAP_EDGE_URL")
        self.ca = Environment.value("IAP_EDGE_CA")
    }

    /// The edge client, when an edge URL is configured.
    func edgeClient() -> EdgeClient? {
        guard let edge else { return nil }
        do {
            return try EdgeClient(base: edge, caFile: ca)
        } catch {
            fail("--ca \(ca ?? ""): \(error)", exit: ExitCodes.usage)
        }
    }

    func call<M: RPCMethod>(_ service: SuiteService, _ method: M.Type, _ params: M.Params, timeoutSeconds: Int64 = 30)
        async -> (result: M.Result, raw: [UInt8])
    {
        if ContractMethods.publicAtTheEdge[M.name] != nil, let edge = edgeClient() {
            defer { Task { await edge.shutdown() } }
            let outcome: Result<[UInt8], RPCError>
            do {
                outcome = try await edge.callRaw(
                    method: M.name, params: try JSONWriter.encodeBodyOrThrow(params), session: nil, timeoutSeconds: timeoutSeconds)
            } catch EdgeClient.Failure.unreachable(let why) {
                fail("cannot reach the edge at \(edge.base): \(why)", exit: ExitCodes.unreachable)
            } catch EdgeClient.Failure.http(_, let why) {
                fail("the edge at \(edge.base) answered \(why)", exit: ExitCodes.refused)
            } catch {
                fail("the edge at \(edge.base) answered something that is not JSON-RPC: \(error)", exit: ExitCodes.refused)
            }
            switch outcome {
            case .success(let raw):
                guard let result = try? RPCCodec.decodeResult(M.Result.self, from: raw) else {
                    fail("the edge's answer to \(M.name) does not decode", exit: ExitCodes.refused)
                }
                return (result, raw)
            case .failure(let error):
                report(error, target: "the edge", address: edge.base, addressVariable: "IAP_EDGE_URL")
            }
        }
        let address = service.address(flag: addr)
        let client: RPCClient
        do {
            client = try RPCClient(
                address: address, configuration: .init(connections: 1, callTimeout: .seconds(timeoutSeconds), tls: internalTLS()))
        } catch {
            fail("\(service.rawValue) address: \(error.message)", exit: ExitCodes.usage)
        }
        defer { Task { await client.close() } }
        do {
            let raw = try await client.callRaw(method: M.name, params: try JSONWriter.encodeBodyOrThrow(params))
            return (try RPCCodec.decodeResult(M.Result.self, from: raw), raw)
        } catch {
            report(error, target: service.rawValue, address: address, addressVariable: service.environmentVariable)
        }
    }

    /// Any method by name with raw JSON params (`iap call`); returns the raw result.
    func callRaw(method: String, params: [UInt8], address: String, target: String) async -> [UInt8] {
        let client: RPCClient
        do {
            client = try RPCClient(address: address, configuration: .init(connections: 1, callTimeout: .seconds(30), tls: internalTLS()))
        } catch {
            fail("address: \(error.message)", exit: ExitCodes.usage)
        }
        defer { Task { await client.close() } }
        do {
            return try await client.callRaw(method: method, params: params)
        } catch {
            report(error, target: target, address: address, addressVariable: nil)
        }
    }

    /// Calls and prints: the raw result with --json, else `human(result)`.
    @discardableResult
    func run<M: RPCMethod>(_ service: SuiteService, _ method: M.Type, _ params: M.Params, human: (M.Result) -> String) async -> M.Result {
        let (result, raw) = await call(service, method, params)
        print(json ? String(decoding: raw, as: UTF8.self) : human(result))
        return result
    }

    func report(_ error: RPCError, target: String, address: String, addressVariable: String?) -> Never {
        if error.knownCode == .unavailable, error.has(.connectFailed) || error.has(.connectionLost) {
            fail(
                "cannot reach \(target) at \(address): is the suite running? start it with compose/up.sh "
                    + "(or point \(addressVariable.map { "\($0) / " } ?? "")--addr at it)", exit: ExitCodes.unreachable)
        }
        fail("error \(error.code): \(error.message)\(Self.hint(error).map { "\n\($0)" } ?? "")", exit: ExitCodes.refused)
    }

    static func hint(_ error: RPCError) -> String? {
        switch error.knownCode {
        case .unauthenticated? where !error.has(.invalidCredentials):
            return "sign in again: iap accounts login USERNAME"
        case .forbidden? where error.has(.adminTokenRequired):
            return "admin methods need --admin-token (or IAP_ADMIN_TOKEN; compose/up.sh keeps it in data/admin-token)"
        case .insufficientFunds?: return "check the balance with: iap balance"
        case .rateLimited?: return "wait and try again"
        case .unavailable?: return "a service behind this one is down or slow; nothing was changed, so it is safe to retry"
        case .invalidReceipt?: return "the purchase could not be verified (status \(error.data.extra["status"]?.intValue.map(String.init) ?? "?"))"
        case .invalidParams?: return error.data.extra["field"]?.stringValue.map { "check the value given for \($0)" }
        default: return nil
        }
    }
}

/// Admin token: flag, IAP_ADMIN_TOKEN, else the file compose/up.sh keeps in the data directory.
/// `--admin-token`, else IAP_ADMIN_TOKEN, else data/admin-token.
struct AdminTokenOption: ParsableArguments {
    @Option(name: .customLong("admin-token"), help: "Admin token (default: IAP_ADMIN_TOKEN, else data/admin-token).")
    var adminToken: String?
    func resolved() throws -> String {
        guard let token = try resolveAdminToken(adminToken) else {
            throw ValidationError("no admin token: pass --admin-token or set IAP_ADMIN_TOKEN")
        }
        return token
    }
}

func resolveAdminToken(_ flag: String?) throws -> String? { try resolveToken(flag, env: "IAP_ADMIN_TOKEN", file: "admin-token") }

/// A token: the flag, else the environment variable (or the file `<NAME>_FILE` names, as the services read it), else the
/// file compose/up.sh keeps in the data directory. A `<NAME>_FILE` that cannot be read, or set beside `<NAME>`, is an error:
/// never a silent fall back to another token (before 2026-11-30 it fell back to the data directory's).
func resolveToken(_ flag: String?, env: String, file: String) throws -> String? {
    if let flag { return flag }
    if let value = try Environment.fromEnvironment(env, ProcessInfo.processInfo.environment), !value.isEmpty { return value }
    if let file = ProcessInfo.processInfo.environment[env + "_FILE"], !file.isEmpty { throw ValidationError("\(env)_FILE: \(file) is empty") }
    let dir = Environment.value("IAP_DATA_DIR") ?? "data"
    return (try? String(contentsOfFile: dir + "/" + file, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
}

/// Reads an argument that may be a file, `-` (standard input) or the text itself (a JWS, a signed payload).
func textArgument(_ value: String) throws -> String {
    if value == "-" {
        return String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
    if FileManager.default.fileExists(atPath: value), let data = FileManager.default.contents(atPath: value) {
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
    return value
}

/// A plain text table: columns padded to their widest cell, trailing spaces trimmed.
func table(_ header: [String], _ rows: [[String]]) -> String {
    let all = [header] + rows
    let widths = header.indices.map { c in all.map { $0[c].count }.max() ?? 0 }
    return all.map { row in
        let line = row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  ")
        return String(line.reversed().drop { $0 == " " }.reversed())
    }.joined(separator: "\n")
}

/// Milliseconds since the epoch as an ISO 8601 UTC time.
func isoTime(_ ms: Int64?) -> String {
    guard let ms else { return "-" }
    let formatter = ISO8601DateFormatter()
    return formatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000))
}

/// Reads a secret: the flag, else the environment variable, else a prompt without echo on a terminal,
/// else one line of standard input.
func readSecret(_ flag: String?, env: String, prompt: String) throws -> String {
    if let flag { return flag }
    if let value = Environment.value(env) { return value }
    if isatty(STDIN_FILENO) != 0, let typed = getpass(prompt) {
        return String(cString: typed)
    }
    guard let line = readLine(strippingNewline: true), !line.isEmpty else {
        throw ValidationError("no password given: use --password, \(env), or type it when asked")
    }
    return line
}
