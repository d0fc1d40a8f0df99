import ArgumentParser
import Foundation
import JSONRPC
import RPCTransport
import ServiceSupport

/// `iap call SERVICE METHOD '{params}'`: any method of any service, printing the raw result.
struct CallCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "call", abstract: "Call any method of a service with JSON params; prints the result as JSON.")

    @Argument(help: "accounts, catalog, verification, fulfillment, sim, or HOST:PORT.") var service: String
    @Argument(help: "Method name, e.g. catalog.listProducts.") var method: String
    @Argument(help: "Params as a JSON object.") var params: String = "{}"
    @Option(
        help: "Service address HOST:PORT, or HOST:PORT,HOST:PORT for instances (default: IAP_<SERVICE>_ADDR, else 127.0.0.1 and the default port).")
    var addr: String?

    func run() async throws {
        guard let scanned = try? JSONScanner.scan(Array(params.utf8)), scanned.root.kind == .object else {
            throw ValidationError("params must be a JSON object, e.g. '{\"storefront\":\"USA\"}'")
        }
        let address = try Self.address(service: service, flag: addr)
        let result = await ServiceCall().callRaw(method: method, params: Array(params.utf8), address: address, target: service)
        print(String(decoding: result, as: UTF8.self))
    }

    static func address(service: String, flag: String?) throws -> String {
        if let known = SuiteService(rawValue: service) { return known.address(flag: flag) }
        if let flag { return flag }
        guard service.contains(":") else {
            throw ValidationError(
                "unknown service \"\(service)\": use one of \(SuiteService.allCases.map(\.rawValue).joined(separator: ", ")) or HOST:PORT")
        }
        return service
    }
}
