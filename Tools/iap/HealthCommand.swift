import ArgumentParser
import Foundation
import JSONRPC
import RPCTransport
import ServiceSupport

/// `iap health`: every service's `health.check` at once, with the status of what each depends on.
struct HealthCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "health", abstract: "Check every service of the suite and what each depends on.",
        discussion: """
            Exit code 0 when every service answers ok, 2 when any cannot be reached, 1 when any answers degraded. \
            A service given as several instances (IAP_*_ADDR=host:port,host:port) is checked instance by instance. \
            With --edge URL: only the edge's GET /readyz (it checks accounts, catalog and fulfillment itself), as seen from outside.
            """)
    @Flag(help: "Print {service: health report or null} as JSON.") var json = false
    @Option(help: "Check the edge at this URL (/readyz) instead of each service (e.g. https://localhost:8443).") var edge: String?
    @Option(help: "Check the support console at this URL (/readyz: it reaches accounts and fulfillment), e.g. https://localhost:8444.")
    var console: String?
    @Option(help: "PEM certificate authority for the edge's certificate (default: IAP_EDGE_CA).") var ca: String?
    @Option(help: "Seconds to wait for each instance's answer before reporting it down.") var timeout: Double = 5

    func validate() throws {
        guard timeout > 0, timeout <= 3600 else { throw ValidationError("--timeout must be between 0 and 3600 seconds") }
    }

    func run() async throws {
        if let url = edge ?? console {
            let what = edge != nil ? "the edge" : "the console"
            let client = try EdgeClient(base: url, caFile: Environment.resolve(ca, env: "IAP_EDGE_CA"))
            defer { Task { await client.shutdown() } }
            let readiness: (status: Int, report: String)
            do {
                readiness = try await client.readiness()
            } catch {
                printError("cannot reach \(what) at \(url): \(error)")
                throw ExitCodes.unreachable
            }
            print(
                json
                    ? readiness.report
                    : "\(edge != nil ? "edge" : "console") \(url): \(readiness.status == 200 ? "ready" : "not ready") \(readiness.report)")
            if readiness.status != 200 { throw ExitCodes.refused }
            return
        }
        var reports: [(SuiteService, String, HealthReport?, String?)] = []
        var instanceCounts: [SuiteService: Int] = [:]
        // The Play simulator is checked when it is configured (IAP_PLAY_ADDR): the development stack may run without it.
        for service in SuiteService.allCases where service != .play || Environment.value(SuiteService.play.environmentVariable) != nil {
            // Each instance on its own: a client over the list would answer from whichever instance is up.
            let instances = try RPCClient.parseAddresses(service.address(flag: nil))
            instanceCounts[service] = instances.count
            for instance in instances {
                let address = "\(instance.host):\(instance.port)"
                let client = RPCClient(
                    host: instance.host, port: instance.port,
                    configuration: .init(connections: 1, callTimeout: .milliseconds(Int64(timeout * 1000)), tls: internalTLS()))
                do {
                    reports.append((service, address, try await client.call(HealthCheck.self, EmptyParams()), nil))
                } catch {
                    reports.append((service, address, nil, error.message))
                }
                await client.close()
            }
        }
        if json {
            // {service: report or null}; a service of several instances: {service: {"host:port": report or null}}.
            var object: [String: JSONValue] = [:]
            for (service, address, report, _) in reports {
                let value = try report.map { try JSONDecoder().decode(JSONValue.self, from: Data(try JSONByteEncoder.encode($0))) } ?? .null
                if instanceCounts[service, default: 1] > 1 {
                    var byInstance = object[service.rawValue]?.objectValue ?? [:]
                    byInstance[address] = value
                    object[service.rawValue] = .object(byInstance)
                } else {
                    object[service.rawValue] = value
                }
            }
            print(String(decoding: try JSONByteEncoder.encode(JSONValue.object(object)), as: UTF8.self))
        } else {
            print(
                table(
                    ["service", "address", "status", "uptime", "depends on"],
                    reports.map { service, address, report, error in
                        guard let report else { return [service.rawValue, address, "down", "-", error ?? ""] }
                        let deps = report.dependencies.map { "\($0.name) \($0.status.rawValue)\($0.latencyMs.map { " \($0) ms" } ?? "")" }
                        return [service.rawValue, address, report.status.rawValue, "\(report.uptimeMs / 1000) s", deps.joined(separator: ", ")]
                    }))
        }
        if reports.contains(where: { $0.2 == nil }) {
            if !json { printError("a service cannot be reached; start the suite with compose/up.sh, or see its logs in data/logs") }
            throw ExitCodes.unreachable
        }
        if reports.contains(where: { $0.2?.status != .ok }) {
            if !json { printError("not every service is ok; see the services' logs in data/logs") }
            throw ExitCodes.refused
        }
    }
}

/// `iap methods SERVICE`: the service's methods from its `rpc.discover` document.
struct MethodsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "methods", abstract: "List a service's methods with their params (from rpc.discover).")
    @Argument(help: "accounts, catalog, verification, fulfillment or sim.") var service: SuiteService
    @OptionGroup var client: ClientOptions

    func run() async throws {
        let (document, raw) = await ServiceCall(options: client).call(service, RPCDiscover.self, EmptyParams())
        if client.json {
            print(String(decoding: raw, as: UTF8.self))
            return
        }
        let methods = document["methods"]?.arrayValue ?? []
        print(
            table(
                ["method", "params", "summary"],
                methods.map { m in
                    let params = (m["params"]?.arrayValue ?? []).compactMap { p -> String? in
                        guard let name = p["name"]?.stringValue else { return nil }
                        return p["required"]?.boolValue == true ? name : name + "?"
                    }
                    return [m["name"]?.stringValue ?? "?", params.joined(separator: ", "), m["summary"]?.stringValue ?? ""]
                }))
    }
}
