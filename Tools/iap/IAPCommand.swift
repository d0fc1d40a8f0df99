import ArgumentParser

/// `iap`: the suite's command-line client. Exit codes: 0 success; 1 the service (or a check) refused;
/// 2 a service could not be reached; 64 usage errors.
@main
struct IAPCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "iap",
        abstract: "Command-line client for the in-app purchase suite.",
        discussion: """
            Addresses: --addr, else IAP_ACCOUNTS_ADDR / IAP_CATALOG_ADDR / IAP_VERIFICATION_ADDR / IAP_FULFILLMENT_ADDR / \
            IAP_SIM_ADDR, else the config file's "addresses", else 127.0.0.1 and the default ports (docs/contract.md). \
            `iap accounts login` saves the session (mode 0600) in $IAP_CONFIG, else $XDG_CONFIG_HOME/iap/config.json, else ~/.config/iap/config.json. \
            Exit codes: 0 ok, 1 refused by a service, 2 a service unreachable, 64 usage.
            """,
        subcommands: [
            AccountsCommand.self, CatalogCommand.self, ReceiptCommand.self, RedeemCommand.self, RestoreCommand.self,
            BalanceCommand.self, LedgerCommand.self, SpendCommand.self, EntitlementsCommand.self, ContentCommand.self,
            VerifyCommand.self, ApplyNotificationCommand.self, ReceiveNotificationCommand.self, ReceivePlayNotificationCommand.self,
            RevokeCommand.self, AdminCommand.self,
            AppStoreCommand.self, SupportCommand.self, OffersCommand.self, EventsCommand.self, WebhooksCommand.self,
            RetentionCommand.self, SimCommand.self, PlayCommand.self, HealthCommand.self, MethodsCommand.self, CallCommand.self, DemoCommand.self,
            ConsoleCommand.self,
        ])
}
